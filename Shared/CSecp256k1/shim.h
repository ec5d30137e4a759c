// libsecp256k1 (Debian libsecp256k1-dev 0.2.0, built with the ECDH, recovery,
// extrakeys and schnorrsig modules): recoverable ECDSA signatures (Status signs every
// message, and grants, with them) and ECDH (the Status payload key).
#include <secp256k1.h>
#include <secp256k1_ecdh.h>
#include <secp256k1_recovery.h>
