package main

// The Go peer: an APNs sender the way gorush / sideshow/apns2 send — net/http over
// HTTP/2 + TLS, a cached ES256 provider token (regenerated after 50 minutes, apns2's
// TokenTimeout), one goroutine per push with bounded concurrency. Standard library only.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

type token struct {
	mu       sync.Mutex
	key      *ecdsa.PrivateKey
	keyID    string
	teamID   string
	issuedAt int64
	bearer   string
}

const tokenTimeout = 3000 // seconds, as apns2

func loadKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block in " + path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an ECDSA key: " + path)
	}
	return key, nil
}

// Bearer returns the cached provider token, signing a new one when it is too old.
func (t *token) Bearer() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now().Unix()
	if t.bearer != "" && now-t.issuedAt < tokenTimeout {
		return t.bearer, nil
	}
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"ES256","kid":"` + t.keyID + `"}`))
	claims := enc.EncodeToString([]byte(`{"iss":"` + t.teamID + `","iat":` + strconv.FormatInt(now, 10) + `}`))
	digest := sha256.Sum256([]byte(header + "." + claims))
	r, s, err := ecdsa.Sign(rand.Reader, t.key, digest[:])
	if err != nil {
		return "", err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	t.issuedAt, t.bearer = now, "bearer "+header+"."+claims+"."+enc.EncodeToString(sig)
	return t.bearer, nil
}

func newAPNsClient(caFile string) (*http.Client, error) {
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("no certificate in " + caFile)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     60 * time.Second,
	}
	return &http.Client{Transport: transport, Timeout: 20 * time.Second}, nil
}

type push struct {
	token, topic, id, collapseID string
	expiration                   int64
	body                         []byte
}

// send posts one push and returns the HTTP status (and the body of a refusal).
func send(client *http.Client, base string, tok *token, p push) (int, string, error) {
	req, err := http.NewRequest("POST", base+"/3/device/"+p.token, bytes.NewReader(p.body))
	if err != nil {
		return 0, "", err
	}
	bearer, err := tok.Bearer()
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("authorization", bearer)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("apns-topic", p.topic)
	req.Header.Set("apns-push-type", "alert")
	req.Header.Set("apns-priority", "10")
	req.Header.Set("apns-id", p.id)
	req.Header.Set("apns-expiration", strconv.FormatInt(p.expiration, 10))
	req.Header.Set("apns-collapse-id", p.collapseID)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 {
		return resp.StatusCode, "", fmt.Errorf("answered over HTTP/%d.%d", resp.ProtoMajor, resp.ProtoMinor)
	}
	return resp.StatusCode, string(body), nil
}
