#!/usr/bin/env python3
"""A first, rough end-to-end throughput figure for a running dev stack (`make up`).

Registers a fresh server with USERS users of two devices each (one APNs, one FCM),
sends NOTIFIES native notifications over keep-alive connections from THREADS
threads, then waits until the provider fakes have received every push and prints:
the accept rate at ingest, and notifications (and pushes) per second from the first
request to the last push received by the fakes. Python standard library only.

Start the stack with a rate limit that does not get in the way, e.g.:
  PUSHRELAY_RATELIMIT_REQUESTS=100000000 CONFIG=release make up
  python3 benchmarks/rough_throughput.py --users 500 --notifies 5000 --threads 16
"""
import argparse, base64, http.client, json, os, threading, time, uuid

p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1"); p.add_argument("--port", type=int, default=8080)
p.add_argument("--control", default="127.0.0.1:8445")
p.add_argument("--users", type=int, default=500); p.add_argument("--notifies", type=int, default=5000)
p.add_argument("--threads", type=int, default=16); p.add_argument("--timeout", type=float, default=300)
a = p.parse_args()

server, key, realm = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex, str(uuid.uuid4())
auth = "Basic " + base64.b64encode(f"{server}:{key}".encode()).decode()
push_key = base64.b64encode(b"\x31" + os.urandom(32)).decode()

def conn():
    return http.client.HTTPConnection(a.host, a.port, timeout=30)

def call(c, method, path, body, form=False):
    headers = {"authorization": auth,
               "content-type": "application/x-www-form-urlencoded" if form else "application/json"}
    c.request(method, path, body if form else json.dumps(body), headers)
    r = c.getresponse(); data = r.read()
    return r.status, data

c = conn()
status, _ = call(c, "POST", "/api/v1/remotes/server/register",
                 f"zulip_org_id={server}&zulip_org_key={key}&hostname=bench&contact_email=b%40e.x", form=True)
assert status == 200, status
tokens = set()
for u in range(a.users):
    apns, fcm = os.urandom(32).hex(), f"bench-{uuid.uuid4().hex}"
    tokens.update([apns, fcm])
    for kind, tok in (("apns", apns), ("fcm", fcm)):
        body = {"realm_uuid": realm, "user_id": u, "token_kind": kind, "token": tok,
                "push_key": push_key, "push_key_id": 1}
        if kind == "apns": body["ios_app_id"] = "org.zulip.Zulip"
        s, d = call(c, "POST", "/v1/devices", body)
        assert s in (200, 201), (s, d)
print(f"registered {a.users} users, {len(tokens)} devices")

counter = iter(range(a.notifies)); lock = threading.Lock(); errors = []
def worker():
    c = conn()
    while True:
        with lock:
            i = next(counter, None)
        if i is None: return
        u = i % a.users
        payload = {"type": "message", "realm_url": "https://chat.example.com", "realm_name": "Bench",
                   "user_id": u, "sender_id": 1, "sender_full_name": "Bench", "sender_avatar_url": "https://x/a.png",
                   "message_id": i, "time": 1754385395, "content": "x" * 120, "recipient_type": "direct",
                   "recipient_user_ids": sorted({1, u})}
        s, d = call(c, "POST", "/v1/notify", {"realm_uuid": realm, "user_id": u, "payload": payload})
        if s != 202: errors.append((s, d[:200]))

start = time.time()
threads = [threading.Thread(target=worker) for _ in range(a.threads)]
for t in threads: t.start()
for t in threads: t.join()
accepted_at = time.time()
expected = 2 * a.notifies
print(f"accepted {a.notifies - len(errors)} notifies in {accepted_at - start:.2f} s "
      f"= {(a.notifies - len(errors)) / (accepted_at - start):.0f}/s at ingest; errors: {len(errors)} {errors[:3]}")

def received():
    out = []
    for provider in ("apns", "fcm"):
        cc = http.client.HTTPConnection(*a.control.split(":"), timeout=60)
        cc.request("GET", f"/{provider}/received"); data = json.loads(cc.getresponse().read())
        out += [x for x in data if x["token"] in tokens and x["status"] == 200]
    return out

while True:
    got = received()
    if len(got) >= expected or time.time() - start > a.timeout: break
    time.sleep(1)
last = max(x["received_at_ms"] for x in got) / 1000 if got else time.time()
span = last - start
print(f"delivered {len(got)}/{expected} pushes; first request → last push received: {span:.2f} s")
print(f"end to end: {a.notifies / span:.0f} notifications/s = {len(got) / span:.0f} pushes/s "
      f"({a.threads} client threads, everything on this machine)")
