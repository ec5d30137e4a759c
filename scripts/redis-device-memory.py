#!/usr/bin/env python3
"""Redis memory per registered device, measured on a scratch redis-server.

Writes N devices with the relay's key layout (Shared/DeviceState/RedisKeys.swift:
`dev:{id}` hash, `dev:{id}:keys` push keys, `user:{realm}:{user_id}` set, the token index
`tok:…`), with values of the sizes the relay stores (sealed tokens and push keys are
XChaCha20-Poly1305 ciphertexts in base64: 24-byte nonce + 16-byte tag + the plaintext),
half APNs (64 hex characters) and half FCM (~163 characters) tokens, two devices per
user, and prints used_memory per device. Random bytes stand in for ciphertexts.

  scripts/redis-device-memory.py [DEVICES]     (default 200000; needs redis-server, redis-cli)
"""
import base64
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

def sealed(plaintext_len):
    return "v1:s1:" + base64.b64encode(os.urandom(24 + plaintext_len + 16)).decode()

def resp(*args):
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)

def main():
    devices = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    for tool in ("redis-server", "redis-cli"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing (apt-get install redis-server)")
    port = 6399
    workdir = tempfile.mkdtemp()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", workdir], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        def used():
            info = subprocess.run(["redis-cli", "-p", str(port), "info", "memory"], capture_output=True, text=True).stdout
            return int(next(l.split(":")[1] for l in info.splitlines() if l.startswith("used_memory:")))
        before = used()
        realms = [str(uuid.uuid4()) for _ in range(100)]
        now = str(int(time.time() * 1000))
        batch = []
        def flush():
            subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=b"".join(batch), capture_output=True, check=True)
            batch.clear()
        for i in range(1, devices + 1):
            realm = realms[i % len(realms)]
            user = i // 2
            provider, token_len = ("apns", 64) if i % 2 else ("fcm", 163)
            batch.append(resp("HSET", f"pr:dev:{i}", "realm", realm, "provider", provider, "token", sealed(token_len),
                              "status", "active", "reason", "", "invalid_ms", "", "registered_ms", now,
                              "created_ms", now, "user_id", user, "api", "native", "app_id", "org.zulip.Zulip",
                              "key_id", 1, "scheme", "secretbox"))
            batch.append(resp("HSET", f"pr:dev:{i}:keys", 1, sealed(33) + "|" + now))
            batch.append(resp("SADD", f"pr:user:{realm}:{user}", i))
            batch.append(resp("SET", f"pr:tok:{realm}:{provider}:{os.urandom(32).hex()}:-", i))
            if len(batch) >= 20_000:
                flush()
        if batch:
            flush()
        after = used()
        print(f"{devices} devices: {(after - before) / 2**20:.1f} MiB, {(after - before) / devices:.0f} bytes a device, "
              f"{(after - before) / devices * 1e6 / 2**30:.2f} GiB per million devices (used_memory, jemalloc)")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)

if __name__ == "__main__":
    main()
