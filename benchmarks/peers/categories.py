#!/usr/bin/env python3
"""Splits a callgrind dump's instructions (self cost of every function) into the
categories the cost budget is argued in: HTTP/2 + TLS, HTTP/1 (ingest's server), Kafka,
Redis, records/JSON, crypto, metrics/logs/traces, allocation, reference counting,
scheduling and hops,
the Swift runtime's own work (metadata, casts, exclusivity checks), strings and
hashing, copies, other. Self cost only: a malloc called by the JSON reader counts as
allocation, not JSON. Prints a table, optionally per notification.

    benchmarks/peers/categories.py DUMP [--per N] [--json OUT]
"""
import argparse, json, re, subprocess, sys

# First match wins: the specific (a library, a module's types) before the generic.
CATEGORIES = [
    ("HTTP/2 + TLS", r"libnghttp|NIOHTTP2|HPACK|HTTP2|Huffman|HeaderFieldName|isValidFieldName|legalHeaderField|"
        r"NIOSSL|CNIOBoringSSL|PushHTTP2Client|PushConnection|APNsClient|FCMClient|HMSClient|WNSClient|WebPushClient|"
        r"appendSym_fast|HeaderTableStorage|HeaderIndexTable|IndexedHeaderTable|DynamicHeaderTable|StaticHeaderTable|"
        r"HeaderBlockValidator|OutboundFlowControlBuffer|encodeInteger|PendingStreamWrites|StreamMap|StreamState|"
        r"ConnectionStreamState|StreamFlowControl"),
    ("HTTP/1 server", r"Hummingbird|HTTPDecoder|llhttp|HTTP1|HTTPResponseEncoder|HTTPServer|HTTPFields|HTTPField|"
        r"HTTPRequest|HTTPResponse|Router|Middleware|ResponseWriter|ResponseBody|RequestBody|RequestFields|BetterHTTPParser|"
        r"HTTPChannelHandler|HTTPPart"),
    ("Kafka", r"librdkafka|Kafka|KeyOrder|OffsetTracker|ConsumerStateMachine|DeliveryReport|DeliveryRegistry|"
        r"BatchAcknowledgement|rd_kafka|mtx_lock|mtx_unlock|cnd_|thrd_|copyRecord|pollLoop"),
    ("Redis", r"hiredis|Redis|RESP|DeviceStore|DeliveryLedger|GorushStore|ServerStore|IdempotencyStore|ZulipRealms"),
    ("records/JSON", r"JSONReader|JSONWriter|JSONValue|JSONObjectWriter|JSONText|Wire|Records?\b|Record\.|"
        r"OutboundRecord|PushRequestRecord|DeliveryRecord|DeliveryClass|Base64|ProviderBody|ZulipNotification"),
    ("crypto", r"libsodium|Sodium|PushCrypto|Seal|Keyring|crypto_|CCryptoBoringSSL|secp256k1|JWT|P256|Fingerprint|"
        r"sha256|SHA256|HMAC|XChaCha"),
    ("metrics, logs, traces", r"Metric|Histogram|Counter\b|Counter\.|Prometheus|Logger|Logging|Tracing|OTel|"
        r"ServiceContext|RelayMetrics"),
    ("allocation", r"malloc|free\b|cfree|calloc|realloc|_int_|swift_slowAlloc|swift_allocObject|swift_deallocObject|"
        r"swift_deallocClassInstance|StackAllocator|swift_task_alloc|swift_task_dealloc|consolidate|unlink_chunk|"
        r"swift_allocBox|swift_deallocBox|__deallocating_deinit|tcache|arrayDestroy|_ContiguousArrayBuffer|"
        r"_DictionaryStorage\.allocate|_allocateStringStorage"),
    ("reference counting", r"swift_retain|swift_release|RefCounts|swift_bridgeObject|isUniquelyReferenced|"
        r"swift_unknownObject|doDecrementSlow"),
    ("scheduling and hops", r"libswift_Concurrency|swift_task|swift_job|SelectableEventLoop|Selector|EventLoop|"
        r"epoll|NIOAsync|AsyncStream|AsyncSequence|Continuation|pthread_mutex|pthread_cond|__tls_get_addr|SwiftTLSContext|"
        r"futex|ScheduledTask|LoopsAsGlobalExecutor|NIOLock|ServiceRuntime|TaskGroup|withTaskCancellation|"
        r"swift_continuation|Task<|Channel|PendingWrites|Socket|lll_lock|__lll|sem_|clock_gettime|DispatchTime"),
    ("Swift runtime (metadata, casts, exclusivity)", r"Metadata|getCache|tryCast|swift_dynamicCast|conformsToProtocol|"
        r"beginAccess|endAccess|AccessSet|swift_once|swift_getWitnessTable|ProtocolConformance|swift_checkMetadataState|"
        r"outlined|value witness|type metadata"),
    ("strings and hashing", r"Hasher|hash|String|Unicode|_stringCompare|memcmp|strlen|Substring|Character|UTF8|"
        r"Dictionary|__RawDictionaryStorage|_NativeDictionary|Set<|_NativeSet"),
    ("copies", r"memmove|memcpy|memset|ByteBuffer|copyMemory"),
]


def rows(dump):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", dump],
                         capture_output=True, text=True, errors="replace").stdout
    out = subprocess.run(["swift", "demangle", "--simplified"], input=out, capture_output=True, text=True).stdout
    total = None
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        ir, rest = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in rest:
            total = ir
            continue
        yield ir, rest
    if total is not None:
        yield total, "PROGRAM TOTALS"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dump")
    parser.add_argument("--per", type=float, default=0, help="divide by this (notifications, pushes)")
    parser.add_argument("--json")
    args = parser.parse_args()
    compiled = [(name, re.compile(pattern)) for name, pattern in CATEGORIES]
    sums, total = {}, 0
    for ir, rest in rows(args.dump):
        if rest == "PROGRAM TOTALS":
            total = ir
            continue
        name = next((n for n, p in compiled if p.search(rest)), "other")
        sums[name] = sums.get(name, 0) + ir
    counted = sum(sums.values())
    total = total or counted
    order = [n for n, _ in CATEGORIES] + ["other"]
    print(f"{'category':46} {'share':>6} {'Ir' + (' per unit' if args.per else ''):>14}")
    for name in order:
        ir = sums.get(name, 0)
        value = ir / args.per if args.per else ir
        print(f"{name:46} {100 * ir / total:5.1f}% {value:14,.0f}")
    if args.json:
        json.dump({"total": total, "per": args.per, "categories": sums}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
