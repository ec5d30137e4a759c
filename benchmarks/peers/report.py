#!/usr/bin/env python3
"""Tables and JSON reports for scripts/bench-peer.sh and scripts/bench-instructions.sh."""

import argparse
import datetime
import json
import os
import statistics
import subprocess


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit, dirty = "?", ""
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "commit": commit + ("+dirty" if dirty else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def table(header: list, rows: list) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = []
    for n, r in enumerate([header] + rows):
        cells = [str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write(path: str, report: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}")


def peer(args) -> None:
    relay = json.load(open(args.relay))
    peers = [json.load(open(args.aioapns)), json.load(open(args.go))]
    rows = []
    apns = relay["provider_requests"].get("apns", {})
    answered = sum(apns.values())
    errors = {f"{status} from the fake": c for status, c in apns.items() if status != "200"}
    if relay["rejected"]:
        errors["notifications not accepted by ingest"] = relay["rejected"]
    if answered < relay["provider_requests_expected"]:
        errors["pushes without an answer"] = relay["provider_requests_expected"] - answered
    services = ["dispatcher", "ingest", "encryptor", "feedback"]
    rows.append(
        {
            "sender": "relay (dispatcher)",
            "pushes": relay["pushes"],
            "ok": apns.get("200", 0),
            "errors": sum(errors.values()),
            "error_samples": errors,
            "cpu_seconds": relay["cpu_seconds"]["dispatcher"],
            "wall_seconds": relay["wall_seconds"],
            "payload_bytes": relay["apns_sample"]["bytes"],
            "relay_services_cpu_seconds": sum(relay["cpu_seconds"].get(s, 0) for s in services),
            "cpu_seconds_by_process": relay["cpu_seconds"],
        }
    )
    for p in peers:
        rows.append(
            {
                "sender": p["sender"] + (f" {p['version']}" if p.get("version") else ""),
                "pushes": sum(p["statuses"].values()) + sum(
                    c for k, c in p["error_samples"].items() if not k[:3].isdigit()
                ),
                "ok": p["statuses"].get("200", 0),
                "errors": p["errors"],
                "error_samples": p["error_samples"],
                "cpu_seconds": p["cpu_seconds"],
                "wall_seconds": p["wall_seconds"],
                "payload_bytes": p["payload_bytes"],
            }
        )
    for r in rows:
        r["cpu_us_per_push"] = 1e6 * r["cpu_seconds"] / max(1, r["pushes"])
    go = rows[-1]["cpu_us_per_push"] or 1
    for r in rows:
        r["ratio_to_go"] = r["cpu_us_per_push"] / go
    # The relay's rate is in notifications, each one push per APNs device of its user.
    fan_out = relay["apns_devices_per_user"]
    rate = relay["rate"] * fan_out
    mode = "paced" if rate else "unpaced"
    measured = relay["notifications"] * fan_out
    print()
    print(
        f"CPU per APNs push, one APNs fake, "
        + (f"{rate} pushes/s" if rate else "unpaced (each as fast as the fake answers)")
        + f", {measured} measured pushes each (after a warm-up)"
    )
    print(
        f"  the relay: {relay['notifications']} notifications to {relay['users']} users, "
        f"{fan_out} APNs device{'s' if fan_out != 1 else ''} each"
    )
    print(
        table(
            ["sender", "pushes", "200", "errors", "CPU s", "CPU µs/push", "× Go"],
            [
                [
                    r["sender"],
                    r["pushes"],
                    r["ok"],
                    r["errors"],
                    f"{r['cpu_seconds']:.2f}",
                    f"{r['cpu_us_per_push']:.0f}",
                    f"{r['ratio_to_go']:.2f}",
                ]
                for r in rows
            ],
        )
    )
    for r in rows:
        if r["errors"]:
            print(f"  {r['sender']} errors: {r['error_samples']}")
    # CPU per push by process, the relay's over the pushes it sent and the peers' over
    # theirs: (key in the JSON, label, CPU seconds, pushes).
    cpu = relay["cpu_seconds"]
    processes = [(s, s, cpu.get(s, 0), rows[0]["pushes"]) for s in services]
    processes.append(("four services", "four services", rows[0]["relay_services_cpu_seconds"], rows[0]["pushes"]))
    processes += [(s, f"{s} (context)", cpu.get(s, 0), rows[0]["pushes"]) for s in ["devbroker", "redis"]]
    processes += [(p["sender"], r["sender"], r["cpu_seconds"], r["pushes"]) for p, r in zip(peers, rows[1:])]
    cpu_us_per_push = {key: 1e6 * seconds / max(1, pushes) for key, _, seconds, pushes in processes}
    print()
    print(
        table(
            ["process", "CPU s", "CPU µs/push", "× Go"],
            [
                [label, f"{seconds:.2f}", f"{cpu_us_per_push[key]:.1f}", f"{cpu_us_per_push[key] / go:.2f}"]
                for key, label, seconds, _ in processes
            ],
        )
    )
    dispatcher = cpu_us_per_push["dispatcher"] or 1
    ratios = {
        "dispatcher / go": cpu_us_per_push["dispatcher"] / go,
        "four services / go": cpu_us_per_push["four services"] / go,
        "aioapns / dispatcher": cpu_us_per_push["aioapns"] / dispatcher,
    }
    if mode == "paced":
        ingest_per_request = 1e6 * cpu.get("ingest", 0) / max(1, relay["notifications"])
        ratios["ingest per request / dispatcher per push"] = ingest_per_request / dispatcher
    print("  " + ", ".join(f"{k}: {v:.2f}" for k, v in ratios.items()))
    switches = relay.get("context_switches", {}).get("dispatcher")
    if switches is not None:
        print(f"  dispatcher context switches per push: {switches / max(1, rows[0]['pushes']):.2f} (all its threads)")
    if args.fake_stats and os.path.exists(args.fake_stats):
        try:
            print(f"  the fake's answers over the whole run: {json.load(open(args.fake_stats)).get('apns')}")
        except ValueError:
            pass
    write(
        args.out,
        {
            "machine": machine(),
            "settings": {
                "mode": mode,
                "rate": rate,
                "measured_pushes": measured,
                "notifications": relay["notifications"],
                "devices_per_user": fan_out,
                "users": relay["users"],
                "devices": relay["users"] * fan_out,
                "payload_bytes": relay["apns_sample"]["bytes"],
                "relay_apns_headers": relay["apns_sample"]["headers"],
            },
            "senders": rows,
            "cpu_us_per_push": cpu_us_per_push,
            "ratios": ratios,
            "dispatcher_context_switches_per_push": (
                None if switches is None else switches / max(1, rows[0]["pushes"])
            ),
            "raw": {"relay": relay, "peers": peers},
        },
    )


def instructions(args) -> None:
    runs = [json.load(open(p)) for p in args.runs]
    rows = []
    by_stage: dict = {}

    def m(x):
        return f"{x / 1e6:,.3f}" if x is not None else ""

    for r in runs:
        by_stage.setdefault(r["stage"], []).append(r)
        dispatcher = r["stage"] == "dispatcher"
        rows.append(
            [
                r["stage"],
                r["run"],
                r["notifications"],
                r["pushes"],
                f"{r['instructions'] / 1e6:,.1f}",
                m(r["instructions_per_notification"]),
                m(r["instructions_per_push"]) if dispatcher else "",
                f"{r['idle_instructions_per_second'] / 1e6:,.2f}" if "idle_instructions_per_second" in r else "",
                m(r.get("net_instructions_per_notification")),
                m(r.get("net_instructions_per_push")) if dispatcher else "",
                "" if r["complete"] else "INCOMPLETE",
            ]
        )
    first = runs[0]
    print()
    print(
        f"Instructions (callgrind Ir) per notification, by stage: {first['notifications']} notifications at "
        f"{first['rate']}/s to {first['users']} users × {first['devices_per_user']} devices, "
        f"{first['dead_tokens']} APNs tokens dead (M = millions)"
    )
    print(
        table(
            ["stage", "run", "notifications", "pushes", "M Ir", "M Ir/notif", "M Ir/push", "idle M Ir/s",
             "net M Ir/notif", "net M Ir/push", ""],
            rows,
        )
    )
    print("  net = minus what the stage spends idle (polls, timers) over the window's wall time")
    summary = {}
    for stage, rs in by_stage.items():
        entry = {"runs": len(rs)}
        for key in ["instructions_per_notification", "instructions_per_push", "net_instructions_per_notification",
                    "net_instructions_per_push", "idle_instructions_per_second"]:
            values = [r[key] for r in rs if key in r]
            if not values:
                continue
            entry[key] = statistics.median(values)
            if len(values) > 1 and statistics.median(values) > 0:
                entry[key + "_spread_percent"] = 100 * (max(values) - min(values)) / statistics.median(values)
        if len(rs) > 1:
            print(
                f"  {stage}: {len(rs)} runs, spread (max − min) / median: "
                f"{entry['instructions_per_notification_spread_percent']:.2f} % per notification"
                + (f", {entry['net_instructions_per_notification_spread_percent']:.2f} % net of idle"
                   if "net_instructions_per_notification_spread_percent" in entry else "")
            )
        summary[stage] = entry
    write(args.out, {"machine": machine(), "stages": summary, "runs": runs})


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("peer")
    p.add_argument("--relay", required=True)
    p.add_argument("--aioapns", required=True)
    p.add_argument("--go", required=True)
    p.add_argument("--fake-stats")
    p.add_argument("--out", required=True)
    i = sub.add_parser("instructions")
    i.add_argument("--out", required=True)
    i.add_argument("runs", nargs="+")
    args = parser.parse_args()
    {"peer": peer, "instructions": instructions}[args.command](args)


if __name__ == "__main__":
    main()
