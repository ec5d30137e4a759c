/// The settings of each stage, its providers and its APIs, in the order docs/configuration.md lists them
/// (`make docs` writes that file from these tables).
extension SettingsCatalog {
    static let ingest = Section(
        "Ingest: limits",
        "The HTTP API's limits: rates, sizes, counts and lifetimes.",
        [
            Setting(
                "pushrelay.ratelimit.requests", .int(1...1_000_000_000), default: "`1000`",
                "ingest: requests per server per window"),
            Setting("pushrelay.ratelimit.window.seconds", .int(1...86_400), default: "`60`", "ingest"),
            Setting("pushrelay.auth.failures.max", .int(1...1_000_000), default: "`20`", "ingest: per client address"),
            Setting("pushrelay.auth.failures.window.seconds", .int(1...86_400), default: "`300`", "ingest"),
            Setting(
                "pushrelay.server.registration", .oneOf(["open", "closed"]), default: "`open`",
                "ingest: `closed` takes new servers only from `pushrelay`"),
            Setting(
                "pushrelay.server.registrations.max", .int(1...1_000_000), default: "`10`",
                "ingest: per client address"),
            Setting("pushrelay.server.registrations.window.seconds", .int(1...86_400 * 7), default: "`3600`", "ingest"),
            Setting("pushrelay.notify.max.device.ids", .int(1...10_000), default: "`100`", "ingest"),
            Setting(
                "pushrelay.device.max.push.keys", .int(1...16), default: "`3`",
                "ingest: push keys kept per device"),
            Setting(
                "pushrelay.server.max.realms", .int(1...10_000_000), default: "`10000`",
                "ingest, `pushrelay`"),
            Setting("pushrelay.server.max.devices", .int(1...1_000_000_000), default: "`10000000`", "ingest"),
            Setting(
                "pushrelay.notify.publish.timeout.ms", .int(100...120_000), default: "`5000`",
                "ingest: Kafka acknowledgement bound (503 after)"),
            Setting("pushrelay.idempotency.ttl.seconds", .int(60...(7 * 86_400)), default: "`86400`", "ingest"),
            Setting(
                "pushrelay.http.max.body.bytes", .int(1024...(64 << 20)), default: "`262144`",
                "ingest (413 beyond)"),
            Setting(
                "pushrelay.http.max.analytics.body.bytes", .int(65536...(256 << 20)), default: "`33554432`",
                "ingest: Zulip's `remotes/server/analytics` upload (413 beyond)"),
            Setting(
                "pushrelay.max.plaintext.bytes", .int(64...3500), default: "`2900`",
                "ingest: larger would not fit the providers' 4 KiB once encrypted"),
        ])

    static let encryptor = Section(
        "Encryptor",
        "The encryptor's consumer and the notifications' lifetime.",
        [
            Setting("pushrelay.encryptor.group", .topic, default: "`pushrelay-encryptor`", "encryptor"),
            Setting(
                "pushrelay.encryptor.concurrency", .int(1...10_000), default: "`256`",
                "encryptor: records in flight"),
            Setting(
                "pushrelay.encryptor.batch", .int(1...4096), default: "`64`",
                "encryptor: requests of one fetch handled together (one Redis round trip, one produce wait)"),
            Setting(
                "pushrelay.notification.ttl.seconds", .int(0...2_419_200), default: "`86400`",
                "encryptor: APNs expiration / FCM ttl; ingest reports it in a dry run"),
        ])

    static let dispatcher = Section(
        "Dispatcher",
        "The dispatcher's consumers, rates, busy devices and send ledger.",
        [
            Setting("pushrelay.dispatcher.group", .topic, default: "`pushrelay-dispatcher`", "dispatcher"),
            Setting(
                "pushrelay.dispatcher.concurrency", .int(1...10_000), default: "`256`",
                """
                dispatcher: records in flight. Each holds its place until the provider answered, the ledger \
                noted it and the outcome is acknowledged, so a replica delivers at most about this many per \
                that time (256 at 100 ms: ~2,500 pushes/s). Raise it for providers that answer slowly; memory \
                grows with it (1,024 took the dispatcher from 64 to 84 MiB at 2,000/s here)
                """),
            Setting(
                "pushrelay.dispatcher.provider.concurrency", .int(1...100_000), default: "`128`",
                "pushes in flight per provider"),
            Setting(
                "pushrelay.dispatcher.retry.group", .topic, default: "`pushrelay-dispatcher.retry`",
                "the retry-topic consumer"),
            Setting(
                "pushrelay.dispatcher.retry.concurrency", .int(1...10_000), default: "`64`",
                "the retry-topic consumer"),
            Setting(
                "pushrelay.dispatcher.rate.ceiling", .double(1...1_000_000), default: "`5000`",
                "pushes/s per APNs topic or FCM project, adapted between floor and ceiling"),
            Setting(
                "pushrelay.dispatcher.rate.floor", .double(0.01...1_000_000), default: "`1`",
                "must not exceed the ceiling"),
            Setting(
                "pushrelay.dispatcher.rate.max.wait.ms", .int(0...60_000), default: "`200`",
                "longer waits for the rate limit park the push on a retry topic"),
            Setting(
                "pushrelay.dispatcher.busy.device.queue", .int(1...100_000),
                default: "a quarter of `PUSHRELAY_DISPATCHER_CONCURRENCY` (64)",
                """
                a device's pushes go one at a time; past this many pushes waiting for busy devices, the next \
                one behind a busy device is parked on `push.retry.1` (out of its device's order) instead of \
                taking a place in flight
                """),
            Setting(
                "pushrelay.dispatcher.retry.busy.device.queue", .int(1...100_000),
                default: "a quarter of `PUSHRELAY_DISPATCHER_RETRY_CONCURRENCY` (16)",
                "the same for the retry consumer"),
            Setting(
                "pushrelay.dispatcher.busy.device.park.after.ms", .int(0...600_000), default: "`500`",
                """
                only a push behind a device busy this long is parked that way (under load many devices are \
                busy for a moment; their pushes wait)
                """),
            Setting(
                "pushrelay.dispatcher.dedupe.ttl.seconds", .int(3600...(30 * 86_400)), default: "`172800`",
                "life of the send-ledger markers (raised to the retry horizon + 1 h if shorter)"),
        ])

    static let providers = Section(
        "Dispatcher: providers",
        "Where and how the dispatcher reaches each provider.",
        [
            Setting("pushrelay.apns.url", .text, default: "`https://api.push.apple.com`", "dispatcher"),
            Setting("pushrelay.apns.team.id", .text, default: "unset", "APNs token auth; required with a key file"),
            Setting("pushrelay.apns.key.id", .text, default: "unset", "required with a key file"),
            Setting("pushrelay.apns.key.file", .path, default: "unset", "the .p8 key; APNs is off without it"),
            Setting("pushrelay.apns.ca.file", .path, default: "system roots", "trust roots"),
            Setting(
                "pushrelay.apns.connections", .int(1...64), default: "`2`",
                "HTTP/2 connections to APNs at most; the second opens only when the first has no free stream"),
            Setting("pushrelay.fcm.url", .text, default: "`https://fcm.googleapis.com`", "dispatcher"),
            Setting("pushrelay.fcm.service.account.file", .path, default: "unset", "FCM is off without it"),
            Setting("pushrelay.fcm.project.id", .text, default: "from the service account", ""),
            Setting("pushrelay.fcm.ca.file", .path, default: "system roots", ""),
            Setting(
                "pushrelay.fcm.connections", .int(1...64), default: "`2`",
                "HTTP/2 connections to FCM at most, as for APNs"),
            Setting(
                "pushrelay.webpush.vapid.key.file", .path, default: "unset",
                "the VAPID key (P-256 PEM, or 32 bytes base64url); Web Push is off without it"),
            Setting(
                "pushrelay.webpush.vapid.subject", .text, default: "unset",
                "the VAPID `sub` (`mailto:` or `https:`); required with a key"),
            Setting(
                "pushrelay.simplepush.enabled", .bool, default: "`true`",
                "simple push / UnifiedPush wake-ups (no credentials)"),
            Setting(
                "pushrelay.push.endpoint.allowed.hosts", .text, default: "none",
                """
                hosts (comma-separated) that device-chosen endpoints may name even though they resolve to \
                loopback/private addresses
                """),
            Setting(
                "pushrelay.push.endpoint.ca.file", .path, default: "system roots",
                "trust roots for Web Push, simple push and WNS endpoints"),
            Setting(
                "pushrelay.push.endpoint.connections", .int(1...64), default: "`4`",
                "connections per endpoint origin at most"),
            Setting(
                "pushrelay.push.endpoint.timeout.ms", .int(100...120_000), default: "`15000`",
                "deadline of one request to an endpoint"),
            Setting("pushrelay.hms.url", .text, default: "`https://push-api.cloud.huawei.com`", "Huawei Push Kit"),
            Setting(
                "pushrelay.hms.token.url", .text, default: "`https://oauth-login.cloud.huawei.com/oauth2/v3/token`",
                "Huawei OAuth 2.0"),
            Setting("pushrelay.hms.app.id", .text, default: "unset", "the AppGallery app id; HMS is off without it"),
            Setting("pushrelay.hms.client.id", .text, default: "the app id", "OAuth client id"),
            Setting(
                "pushrelay.hms.client.secret.file", .path, default: "unset",
                "file holding the app secret; required with the app id"),
            Setting("pushrelay.hms.ca.file", .path, default: "system roots", ""),
            Setting("pushrelay.wns.token.url", .text, default: "`https://login.live.com/accesstoken.srf`", "WNS OAuth"),
            Setting("pushrelay.wns.client.id", .text, default: "unset", "the package SID; WNS is off without it"),
            Setting("pushrelay.wns.client.secret.file", .path, default: "unset", "file holding the client secret"),
            Setting(
                "pushrelay.wns.allowed.hosts", .text, default: "`notify.windows.com`",
                "host suffixes channel URIs may have (only they see the access token)"),
            Setting("pushrelay.wns.ca.file", .path, default: "system roots", "trust roots for the token endpoint"),
        ])

    static let feedback = Section(
        "Feedback",
        "The feedback stage's consumers and the realms' webhooks.",
        [
            Setting("pushrelay.feedback.group", .topic, default: "`pushrelay-feedback`", "feedback"),
            Setting("pushrelay.feedback.concurrency", .int(1...10_000), default: "`16`", "feedback: records in flight"),
            Setting(
                "pushrelay.feedback.reports.group", .topic, default: "`pushrelay-feedback.reports`",
                "feedback: its consumer of `push.deliveries` (outcome counters, feedback hooks)"),
            Setting(
                "pushrelay.feedback.reports.concurrency", .int(1...10_000), default: "`64`",
                "feedback: delivery records in flight"),
            Setting(
                "pushrelay.feedback.hooks.group", .topic, default: "`pushrelay-feedback.hooks`",
                "feedback: its consumer of `push.hooks` (deliveries to feedback hooks)"),
            Setting(
                "pushrelay.feedback.hooks.concurrency", .int(1...10_000), default: "`256`",
                "feedback: feedback-hook deliveries in flight (a slow receiver holds at most these)"),
            Setting(
                "pushrelay.feedback.hook.timeout.ms", .int(100...600_000), default: "`10000`",
                "feedback: deadline of one feedback-hook POST"),
            Setting(
                "pushrelay.feedback.hook.attempts", .int(1...20), default: "`5`",
                "feedback: tries per hook delivery, 1 s, 2 s, 4 s … apart"),
            Setting(
                "pushrelay.feedback.hook.allowed.hosts", .text, default: "none",
                "feedback: hook hosts that may resolve to loopback/private addresses"),
            Setting(
                "pushrelay.feedback.status.group", .topic, default: "`pushrelay-feedback.status`",
                """
                feedback: its consumer of `push.requests`, the retry topics, `push.deliveries` and \
                `push.deadletter` (delivery status, `GET /v1/notifications/{id}`)
                """),
            Setting(
                "pushrelay.feedback.status.concurrency", .int(1...10_000), default: "`64`",
                "feedback: status records in flight"),
            Setting(
                "pushrelay.delivery.status.enabled", .bool, default: "`true`",
                """
                feedback: `false` keeps no delivery status (no consumer, no Redis memory; \
                `GET /v1/notifications/{id}` answers 404)
                """),
            Setting(
                "pushrelay.delivery.status.ttl.seconds", .int(60...(7 * 86_400)), default: "`86400`",
                "feedback: how long a notification's delivery status is kept after it was accepted"),
            Setting(
                "pushrelay.delivery.status.max.devices", .int(1...100_000), default: "`1000`",
                "feedback: devices whose status one notification keeps (the answer says when there were more)"),
            Setting(
                "pushrelay.delivery.status.max.per.realm", .int(1...100_000_000), default: "`100000`",
                "feedback: notifications with status kept per realm; the oldest go first"),
        ])

    static let compat = Section(
        "Ingest: gorush, Zulip and Status",
        "The gorush, Zulip and Status endpoints of ingest.",
        [
            Setting(
                "pushrelay.gorush.max.notifications", .int(1...10_000), default: "`100`",
                "ingest: `notifications[]` per `POST /api/push` (gorush's `max_notification`)"),
            Setting(
                "pushrelay.gorush.max.tokens", .int(0...10_000_000), default: "`0`",
                """
                ingest: tokens per `POST /api/push`, over all its notifications; `0`: no limit but the body's \
                size (gorush has none)
                """),
            Setting(
                "pushrelay.gorush.max.body.bytes", .int(1024...256 * 1024 * 1024), default: "`8388608`",
                """
                ingest: largest `POST /api/push` body (8 MiB: about 120,000 iOS or 50,000 FCM tokens); bodies \
                over `PUSHRELAY_HTTP_MAX_BODY_BYTES` share a budget of four times this, so large sends \
                together hold bounded memory
                """),
            Setting(
                "pushrelay.zulip.transfer.verifications.per.day", .int(0...100_000), default: "`30`",
                """
                ingest: Zulip registration-transfer verifications per day, from anyone (Zulip's limit); `0` \
                turns transfers off (403 `TRANSFER_DISABLED`)
                """),
            Setting(
                "pushrelay.zulip.transfer.allowed.hosts", .text, default: "none",
                """
                ingest: hostnames a transfer may verify although they resolve to private addresses (tests, \
                local servers)
                """),
            Setting(
                "pushrelay.zulip.transfer.ca.file", .path, default: "system roots",
                "ingest: trust roots for the verification fetch (the dev stack's fake CA)"),
            Setting(
                "pushrelay.gorush.apns.topic", .text, default: "none",
                """
                ingest: the APNs topic of iOS notifications without `topic` (without it, `topic` is required)
                """),
            Setting(
                "pushrelay.gorush.sync", .bool, default: "`false`",
                """
                ingest: answer `/api/push` after delivery (gorush's `core.sync`); `?sync=true/false` per call
                """),
            Setting(
                "pushrelay.gorush.sync.timeout.ms", .int(100...600_000), default: "`30000`",
                "ingest: longest a sync call waits for outcomes"),
            Setting(
                "pushrelay.status.enabled", .bool, default: "`false`",
                "ingest: the Status push server (`/status/v1/…`)"),
            Setting(
                "pushrelay.status.key.file", .path, default: "unset",
                """
                ingest: the Status server identity, a secp256k1 private key as 64 hex digits; required when \
                enabled
                """),
            Setting(
                "pushrelay.status.realm.uuid", .text, default: "`5f7a7e5b-0c4e-4b7e-8f3a-5354a7f5e001`",
                "ingest: the realm Status devices are kept under"),
            Setting(
                "pushrelay.status.apns.topics", .text, default: "unset",
                """
                ingest: the APNs topics (bundle ids, comma-separated) Status registrations may name; required \
                when enabled (the APNs key is good for every app of the team)
                """),
            Setting(
                "pushrelay.status.max.targets", .int(1...10_000), default: "`100`",
                "ingest: targets per notification request, public keys per query"),
            Setting(
                "pushrelay.status.requests.max", .int(1...100_000_000), default: "`600`",
                """
                ingest: Status requests per client address per window (429 `RATE_LIMITED` past it; the \
                endpoints take no credentials)
                """),
            Setting(
                "pushrelay.status.requests.window.seconds", .int(1...86_400), default: "`60`",
                "ingest: that window"),
            Setting(
                "pushrelay.status.http.enabled", .bool, default: "`true`",
                "ingest: the Status endpoints on the API port (`false`: over Waku only)"),
            Setting(
                "pushrelay.status.waku.url", .text, default: "unset",
                """
                ingest: a Waku node's REST API (nwaku's, e.g. `http://127.0.0.1:8645`): Status clients reach the \
                push server through it; unset, no Waku
                """),
            Setting(
                "pushrelay.status.waku.pubsub.topic", .text, default: "`/waku/2/rs/16/32`",
                "ingest: the pubsub topic (shard) Status's messages travel on"),
            Setting(
                "pushrelay.status.waku.poll.interval.ms", .int(10...60_000), default: "`250`",
                "ingest: how often the node's message cache is read (it keeps a bounded number of messages)"),
            Setting(
                "pushrelay.status.waku.publish", .oneOf(["relay", "lightpush"]), default: "`relay`",
                "ingest: how answers leave: the node's relay, or lightpush through its service peer"),
            Setting(
                "pushrelay.status.waku.requests.max", .int(1...100_000_000), default: "`600`",
                "ingest: Waku messages per sender key per window (the HTTP limit's window); more are dropped"),
        ])
}
