import AsyncHTTPClient
import DeviceState
import HTTPTypes
import Hummingbird
import Logging
import PushCrypto
import PushModels
import RedisClient
import ServiceKit
import ServiceLifecycle

/// The stores ingest's controllers read and write, each behind its seam where it has one.
public struct IngestStores: Sendable {
    public var servers: any ServerRegistry
    public var devices: any DeviceRegistry
    public var legacyDevices: any LegacyDeviceRegistry
    public var realms: any RealmRegistry
    public var clients: any ClientCounters
    public var idempotency: any IdempotencyStore
    public var gorush: any GorushStore
    public var status: any StatusRegistrationStore
    /// What the dispatchers announce they can send to (gorush's enabled platforms).
    public var providers: any ProviderDirectory
    /// Each notification's delivery status (written by feedback, read here).
    public var deliveryStatus: any DeliveryStatusStore

    public init(
        servers: any ServerRegistry, devices: any DeviceRegistry, legacyDevices: any LegacyDeviceRegistry,
        realms: any RealmRegistry, clients: any ClientCounters, idempotency: any IdempotencyStore,
        gorush: any GorushStore, status: any StatusRegistrationStore,
        providers: any ProviderDirectory = UnannouncedProviders(),
        deliveryStatus: any DeliveryStatusStore = NoDeliveryStatus()
    ) {
        self.servers = servers
        self.devices = devices
        self.legacyDevices = legacyDevices
        self.realms = realms
        self.clients = clients
        self.idempotency = idempotency
        self.gorush = gorush
        self.status = status
        self.providers = providers
        self.deliveryStatus = deliveryStatus
    }

    /// Every store on one Redis (or Redis Cluster) client, under the configured key prefix.
    public static func redis(_ redis: RedisClient, configuration: IngestConfiguration) -> IngestStores {
        let keys = configuration.common.redisKeys
        var devices = DeviceStore(redis: redis, keys: keys, storage: configuration.storageKeys)
        devices.maxStoredKeys = configuration.limits.maxStoredKeys
        return IngestStores(
            servers: ServerStore(redis: redis, keys: keys, pepper: configuration.pepper), devices: devices,
            legacyDevices: ZulipLegacyDevices(devices: devices), realms: RealmDirectory(redis: redis, keys: keys),
            clients: RedisClientCounters(redis: redis, keys: keys),
            idempotency: RedisIdempotencyStore(redis: redis, keys: keys),
            gorush: RedisGorushStore(redis: redis, keys: keys),
            status: RedisStatusRegistrationStore(redis: redis, keys: keys, storage: configuration.storageKeys),
            providers: ProviderAnnouncements(redis: redis, keys: keys),
            deliveryStatus: RedisDeliveryStatusStore(redis: redis, keys: keys, limits: DeliveryStatusLimits()))
    }
}

/// Ingest's HTTP API: one controller per API, each over the stores it needs, and the
/// concerns they share (authentication and rate leases, acceptance onto `push.requests`,
/// device registration, realm ownership) as small types of their own.
public struct IngestAPI: Sendable {
    let native: NativeController
    let zulipServers: ZulipServerController
    let zulipE2EE: ZulipE2EEController
    let zulipLegacy: ZulipLegacyController
    let gorush: GorushController
    let status: StatusController
    let notifications: NotificationStatusController

    /// The controllers on Redis (device state) and a record publisher (`push.requests`).
    public init(
        configuration: IngestConfiguration, redis: RedisClient, publisher: any RecordPublisher, logger: Logger,
        deliveryWatch: DeliveryWatch? = nil
    ) throws {
        try self.init(
            configuration: configuration, stores: .redis(redis, configuration: configuration), publisher: publisher,
            logger: logger, deliveryWatch: deliveryWatch)
    }

    /// The controllers on `stores` and a record publisher (`push.requests`); the
    /// registration transfer fetches over HTTPS unless `transferFetcher` is given.
    public init(
        configuration: IngestConfiguration, stores: IngestStores, publisher: any RecordPublisher, logger: Logger,
        deliveryWatch: DeliveryWatch? = nil, transferFetcher: (any TransferChallengeFetcher)? = nil
    ) throws {
        let limits = configuration.limits
        let authenticator = ServerAuthenticator(
            servers: stores.servers, clients: stores.clients, settings: configuration.auth)
        let acceptor = Acceptor(
            publisher: publisher, topic: configuration.common.topics.requests, timeout: limits.publishTimeout,
            logger: logger, deliveriesTopic: configuration.common.topics.deliveries)
        let registrar = DeviceRegistrar(
            devices: stores.devices, realms: stores.realms, bouncerKeys: configuration.bouncerKeys, limits: limits)
        let ownership = RealmOwnership(realms: stores.realms)
        let sealer = PayloadSealer(keys: configuration.pipelineKeys, logger: logger)
        // One cache of the dispatchers' word for every API that asks it.
        let providers = CachedProviderDirectory(stores.providers)
        native = NativeController(
            authenticator: authenticator, registrar: registrar, ownership: ownership, devices: stores.devices,
            realms: stores.realms, idempotency: stores.idempotency, acceptor: acceptor, sealer: sealer,
            bouncerKeys: configuration.bouncerKeys, limits: limits,
            providers: providers)
        zulipServers = ZulipServerController(
            authenticator: authenticator, servers: stores.servers, realms: stores.realms,
            storage: configuration.storageKeys, limits: limits,
            openRegistration: configuration.openServerRegistration,
            transfers: RegistrationTransfers(
                servers: stores.servers, clients: stores.clients,
                fetcher: transferFetcher
                    ?? HTTPTransferChallengeFetcher(settings: configuration.transfer, logger: logger),
                pepper: configuration.pepper, settings: configuration.transfer))
        zulipE2EE = ZulipE2EEController(
            authenticator: authenticator, registrar: registrar, ownership: ownership, devices: stores.devices,
            acceptor: acceptor, limits: limits)
        zulipLegacy = ZulipLegacyController(
            authenticator: authenticator, ownership: ownership,
            legacyDevices: stores.legacyDevices,
            realms: stores.realms, acceptor: acceptor, sealer: sealer, limits: limits)
        gorush = GorushController(
            authenticator: authenticator, registrar: registrar, realms: stores.realms, store: stores.gorush,
            storage: configuration.storageKeys, acceptor: acceptor, sealer: sealer, settings: configuration.gorush,
            limits: limits, pepper: configuration.pepper, deliveryWatch: deliveryWatch,
            providers: providers,
            largeBodies: ByteBudget(capacity: configuration.gorush.maxBodyBytes.saturatingMultiply(4)),
            responseStats: ResponseStats())
        status = StatusController(
            server: try configuration.status.server(), httpEnabled: configuration.status.httpEnabled,
            authenticator: authenticator, devices: stores.devices,
            realms: stores.realms, store: stores.status, acceptor: acceptor, sealer: sealer)
        notifications = NotificationStatusController(
            authenticator: authenticator, ownership: ownership, store: stores.deliveryStatus)
    }

    /// Closes the clients the API opened (the registration transfer's).
    public func shutdown() async { await zulipServers.transfers.fetcher.shutdown() }

    /// Every route of the public API, each controller's in turn.
    /// The Status push server over Waku, when a node is configured (`PUSHRELAY_STATUS_WAKU_URL`).
    public func statusTransport(_ settings: StatusSettings, logger: Logger) -> (any Service)? {
        guard let waku = settings.waku, let server = status.server else { return nil }
        let store = status.store
        return StatusWakuTransport(
            controller: status, server: server, node: WakuNodeClient(base: waku.url, client: .shared),
            settings: waku,
            registeredKeys: { try await (store as? RedisStatusRegistrationStore)?.hashedKeys() ?? [] },
            logger: logger)
    }

    public func router() -> Router<IngestContext> {
        // The routes once on their own, for the methods each path answers (405 and `Allow`).
        let probe = Router(context: IngestContext.self)
        addRoutes(to: probe)
        let router = Router(context: IngestContext.self)
        router.add(middleware: GorushHeadersMiddleware(stats: gorush.responseStats))
        router.add(middleware: ErrorMiddleware(routes: RouteMethods(probe.routes)))
        router.add(middleware: RequestMetricsMiddleware())
        // A request's span (its own `traceparent` honoured): the notification's trace starts here.
        if RelayTracing.isEnabled { router.add(middleware: SampledTracingMiddleware()) }
        addRoutes(to: router)
        return router
    }

    private func addRoutes(to router: Router<IngestContext>) {
        let collections = [
            zulipServers.routes(), zulipE2EE.routes(), zulipLegacy.routes(), native.routes(), gorush.routes(),
            status.routes(), notifications.routes(), OpenAPIRoute.routes(),
        ]
        for collection in collections { router.addRoutes(collection) }
    }
}

/// Hummingbird's request span, for the requests the sampler traces
/// (`RelayTracing.requestSampling`): the others run with no span and cost no more than
/// with tracing off.
struct SampledTracingMiddleware<Context: RequestContext>: RouterMiddleware {
    let tracing = TracingMiddleware<Context>()

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        let sampling = RelayTracing.requestSampling(
            traceparents: request.headers.values(TraceContextHeader.traceparent))
        guard sampling.traced else { return try await next(request, context) }
        guard !sampling.keepParent,
            request.headers.contains(TraceContextHeader.traceparent)
                || request.headers.contains(TraceContextHeader.tracestate)
        else {
            return try await tracing.handle(request, context: context, next: next)
        }
        // A parent not followed (malformed, or past the budget) is not read at all.
        var head = request.head
        head.headerFields[TraceContextHeader.traceparent] = nil
        head.headerFields[TraceContextHeader.tracestate] = nil
        return try await tracing.handle(Request(head: head, body: request.body), context: context, next: next)
    }
}

/// W3C trace context's request header.
enum TraceContextHeader {
    static let traceparent = HTTPField.Name("traceparent")!
    static let tracestate = HTTPField.Name("tracestate")!
}
