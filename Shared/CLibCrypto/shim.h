// OpenSSL's libcrypto (Debian libssl-dev), for AES-256-IGE (MTProto 2.0 push payloads).
// AES_ige_encrypt is the one IGE implementation OpenSSL ships; it is marked deprecated
// in 3.0 (low-level AES API) but stays available, so the deprecation is silenced here.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/aes.h>
// SHAKE-256 (Status hashes public keys, chat ids and payloads with it).
#include <openssl/evp.h>
