// Apache Curator's recipes against one ZooKeeper-compatible service: each scenario starts its
// own clients (a connection-state listener on every one), drives one recipe with real checks and
// prints one JSON line: {"scenario", "passed", "failures", "facts" (values both systems must
// agree on), "figures" (counts that vary run to run), "states" (every SUSPENDED/LOST/RECONNECTED
// with its time and the server the client was on), "leadership_losses", "errors" (Curator's
// unhandled errors, e.g. "Background retry gave up")}.
//
// java CuratorSuite CONNECT SCENARIO[,SCENARIO...] [--seconds=S] [--hold=S] [--reap-ms=MS]
//                   [--midpoint] [--plant]
//
// --midpoint: before each scenario print {"event":"start"} and, halfway through it,
// {"event":"midpoint"}; each waits for a line on stdin (the driver kills a server at the
// midpoint and restarts it before the next start).  --plant: break the mutex (one client skips
// acquire) and the CuratorCache expectation (a node nobody created), to show the checks fail.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.transaction.CuratorOp;
import org.apache.curator.framework.api.transaction.CuratorTransactionResult;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.cache.NodeCache;
import org.apache.curator.framework.recipes.cache.PathChildrenCache;
import org.apache.curator.framework.recipes.cache.TreeCache;
import org.apache.curator.framework.recipes.cache.TreeCacheEvent;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.curator.framework.recipes.nodes.PersistentTtlNode;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.framework.state.ConnectionStateErrorPolicy;
import org.apache.curator.framework.state.SessionConnectionStateErrorPolicy;
import org.apache.curator.framework.state.StandardConnectionStateErrorPolicy;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public class CuratorSuite {
    static String connect;
    static int seconds = 3;
    static int holdSeconds = 60;
    static long reapMs = 200;
    static boolean midpointMode;
    static boolean plant;
    static String base;
    static final BufferedReader STDIN = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    static final Pattern REMOTE = Pattern.compile("remoteserver:\\S*?:(\\d+)");
    static final int SESSION_MS = 15000;
    static final int CUTOVER_SESSION_MS = 60000;  // the move's outage, with room to spare
    static final int ROLLING_STEPS_MAX = 10000;
    static volatile Ctx ctx;

    interface Check { boolean ok() throws Exception; }
    interface Body { void run() throws Exception; }

    // --- one scenario's record ---------------------------------------------------------------

    static final class Ctx {
        final String scenario;
        final long start = System.currentTimeMillis();
        final List<Object> states = Collections.synchronizedList(new ArrayList<>());
        final List<Object> losses = Collections.synchronizedList(new ArrayList<>());
        final List<Object> errors = Collections.synchronizedList(new ArrayList<>());
        final Map<String, Object> facts = Collections.synchronizedMap(new LinkedHashMap<>());
        final Map<String, Object> figures = Collections.synchronizedMap(new LinkedHashMap<>());
        final List<Object> failures = Collections.synchronizedList(new ArrayList<>());
        final List<Client> clients = Collections.synchronizedList(new ArrayList<>());
        volatile String planned;  // a cause the scenario itself brings about (a session it closes)

        Ctx(String scenario) { this.scenario = scenario; }

        void check(boolean ok, String what) { if (!ok) failures.add(what); }

        void loss(String client) {
            losses.add(obj("client", client, "t", System.currentTimeMillis(), "planned", planned));
        }

        int suspensions(String prefix) {
            int n = 0;
            synchronized (states) {
                for (Object o : states) {
                    @SuppressWarnings("unchecked") Map<String, Object> e = (Map<String, Object>) o;
                    if (((String) e.get("client")).startsWith(prefix) && !"RECONNECTED".equals(e.get("state")) && !"CONNECTED".equals(e.get("state"))) n++;
                }
            }
            return n;
        }
    }

    static final class Client implements AutoCloseable {
        final String name;
        final CuratorFramework fw;
        volatile String server = "";

        Client(String name) throws Exception { this(name, SESSION_MS, new StandardConnectionStateErrorPolicy()); }

        Client(String name, int sessionMs, ConnectionStateErrorPolicy policy) throws Exception {
            this.name = name;
            Ctx c = ctx;
            fw = CuratorFrameworkFactory.builder().connectString(connect).sessionTimeoutMs(sessionMs).connectionTimeoutMs(10000)
                .connectionStateErrorPolicy(policy).retryPolicy(new ExponentialBackoffRetry(200, 10, 2000)).build();
            fw.getConnectionStateListenable().addListener((f, state) -> {
                String was = server;
                if (state == ConnectionState.CONNECTED || state == ConnectionState.RECONNECTED) server = remote(f);
                c.states.add(obj("client", name, "state", state.name(), "t", System.currentTimeMillis(),
                                 "server", state.isConnected() ? server : was, "planned", c.planned));
            });
            fw.getUnhandledErrorListenable().addListener((message, e) -> c.errors.add(name + ": " + message + ": " + e));
            fw.start();
            if (!fw.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException(name + " did not connect");
            c.clients.add(this);
        }

        long sessionId() throws Exception { return fw.getZookeeperClient().getZooKeeper().getSessionId(); }

        public void close() { fw.close(); }
    }

    static String remote(CuratorFramework f) {
        try {
            Matcher m = REMOTE.matcher(f.getZookeeperClient().getZooKeeper().toString());
            return m.find() ? m.group(1) : "";
        } catch (Exception e) {
            return "";
        }
    }

    static List<Client> clients(String prefix, int n) throws Exception {
        List<Client> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(new Client(prefix + i));
        return out;
    }

    // --- helpers ---------------------------------------------------------------------------------

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    /** No child under {@code path}, or no {@code path}: the reaper may take an emptied container first. */
    static boolean noChildren(CuratorFramework fw, String path) throws Exception {
        try {
            return fw.getChildren().forPath(path).isEmpty();
        } catch (KeeperException.NoNodeException e) {
            return true;
        }
    }

    static boolean waitFor(Check check, long ms) throws InterruptedException {
        long deadline = System.currentTimeMillis() + ms;
        while (true) {
            try {
                if (check.ok()) return true;
            } catch (Exception e) {
                // not yet
            }
            if (System.currentTimeMillis() > deadline) return false;
            Thread.sleep(20);
        }
    }

    /** Say {@code event} and wait for the driver's answer line (what it returns). */
    static String handshake(String event) throws Exception {
        if (!midpointMode) return "";
        System.out.println(json(obj("event", event, "scenario", ctx.scenario, "t", System.currentTimeMillis())));
        System.out.flush();
        String answer = STDIN.readLine();
        if (answer == null) throw new IllegalStateException("driver closed stdin");
        return answer;
    }

    static void midpoint() throws Exception { handshake("midpoint"); }

    /** The scenario's working time, {@code seconds}, with the midpoint halfway through it. */
    static void workingTime() throws Exception {
        Thread.sleep(seconds * 500L);
        midpoint();
        Thread.sleep(seconds * 500L);
    }

    /** Run {@code body(i)} for i < n in threads until {@code seconds}, the midpoint halfway. */
    static void during(int n, java.util.function.IntConsumer body, AtomicBoolean stop) throws Exception {
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final int index = i;
            Thread t = new Thread(() -> body.accept(index), ctx.scenario + "-" + i);
            t.start();
            threads.add(t);
        }
        workingTime();
        stop.set(true);
        for (Thread t : threads) t.join(60000);
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }
    static String s(byte[] b) { return b == null ? null : new String(b, StandardCharsets.UTF_8); }

    /** path (relative to root, "" for root) -> data, read directly from the server. */
    static Map<String, String> readTree(CuratorFramework fw, String root) throws Exception {
        Map<String, String> out = new TreeMap<>();
        readInto(fw, root, root, out);
        return out;
    }

    static void readInto(CuratorFramework fw, String root, String path, Map<String, String> out) throws Exception {
        try {
            out.put(path.substring(root.length()), s(fw.getData().forPath(path)));
            for (String child : fw.getChildren().forPath(path)) readInto(fw, root, path + "/" + child, out);
        } catch (KeeperException.NoNodeException e) {
            // deleted meanwhile
        }
    }

    // --- the recipes -----------------------------------------------------------------------------

    static void leaderLatch() throws Exception {
        String path = base + "/latch";
        List<Client> cs = clients("latch", 3);
        List<LeaderLatch> latches = new ArrayList<>();
        for (Client c : cs) {
            LeaderLatch latch = new LeaderLatch(c.fw, path, c.name);
            latch.addListener(new LeaderLatchListener() {
                public void isLeader() {}
                public void notLeader() { ctx.loss(c.name); }
            });
            latch.start();
            latches.add(latch);
        }
        ctx.check(waitFor(() -> leaders(latches) == 1, 20000), "one leader elected");
        int overlaps = 0, samples = 0;
        long half = System.currentTimeMillis() + seconds * 500L, end = half + seconds * 500L;
        boolean midpointDone = false;
        while (System.currentTimeMillis() < end) {
            if (leaders(latches) > 1) overlaps++;
            samples++;
            if (!midpointDone && System.currentTimeMillis() >= half) { midpoint(); midpointDone = true; }
            Thread.sleep(20);
        }
        ctx.check(waitFor(() -> leaders(latches) == 1, 30000), "one leader after the run");
        int first = -1;
        for (int i = 0; i < latches.size(); i++) if (latches.get(i).hasLeadership()) first = i;
        if (first >= 0) {
            latches.get(first).close();  // SILENT: no notLeader for a close
            final int gone = first;
            ctx.check(waitFor(() -> leaders(latches) == 1 && !latches.get(gone).hasLeadership(), 20000), "leadership handed over on close");
        }
        ctx.check(overlaps == 0, "two leaders at once in " + overlaps + " samples");
        ctx.facts.put("leaders_after_handover", leaders(latches));
        ctx.figures.put("samples", samples);
        ctx.figures.put("overlaps", overlaps);
        for (int i = 0; i < latches.size(); i++) if (i != first) latches.get(i).close();
    }

    static int leaders(List<LeaderLatch> latches) {
        int n = 0;
        for (LeaderLatch l : latches) if (l.getState() == LeaderLatch.State.STARTED && l.hasLeadership()) n++;
        return n;
    }

    static void leaderSelector() throws Exception {
        String path = base + "/selector";
        AtomicInteger inside = new AtomicInteger(), overlaps = new AtomicInteger(), turns = new AtomicInteger();
        Set<String> leaders = ConcurrentHashMap.newKeySet();
        AtomicBoolean closing = new AtomicBoolean();
        List<LeaderSelector> selectors = new ArrayList<>();
        for (Client c : clients("selector", 3)) {
            LeaderSelector selector = new LeaderSelector(c.fw, path, new LeaderSelectorListenerAdapter() {
                public void takeLeadership(CuratorFramework f) throws Exception {
                    if (inside.incrementAndGet() > 1) overlaps.incrementAndGet();
                    try {
                        leaders.add(c.name);
                        turns.incrementAndGet();
                        Thread.sleep(100);
                    } catch (InterruptedException e) {
                        if (!closing.get()) ctx.loss(c.name);  // interrupted by a SUSPENDED, not by our close
                        throw e;
                    } finally {
                        inside.decrementAndGet();
                    }
                }
            });
            selector.autoRequeue();
            selector.start();
            selectors.add(selector);
        }
        workingTime();
        closing.set(true);
        for (LeaderSelector selector : selectors) selector.close();
        ctx.check(overlaps.get() == 0, overlaps.get() + " turns overlapped");
        ctx.check(turns.get() >= 3, "only " + turns.get() + " turns");
        ctx.check(leaders.size() == 3, "leaders: " + leaders);
        ctx.facts.put("every_client_led", leaders.size() == 3);
        ctx.figures.put("turns", turns.get());
    }

    static void mutex() throws Exception {
        String path = base + "/mutex";
        List<Client> cs = clients("mutex", 4);
        InterProcessMutex reentrant = new InterProcessMutex(cs.get(0).fw, path);
        ctx.check(reentrant.acquire(10, TimeUnit.SECONDS) && reentrant.acquire(10, TimeUnit.SECONDS), "reentrant acquire");
        ctx.check(reentrant.getParticipantNodes().size() == 1, "one lock node for a reentrant hold");
        reentrant.release();
        ctx.check(reentrant.isAcquiredInThisProcess(), "still held after one of two releases");
        reentrant.release();
        AtomicInteger inside = new AtomicInteger(), overlaps = new AtomicInteger(), errors = new AtomicInteger();
        int[] acquired = new int[cs.size()];
        AtomicBoolean stop = new AtomicBoolean();
        during(cs.size(), i -> {
            InterProcessMutex m = new InterProcessMutex(cs.get(i).fw, path);
            boolean planted = plant && i == 0;
            while (!stop.get()) {
                try {
                    if (!planted && !m.acquire(10, TimeUnit.SECONDS)) continue;
                    try {
                        if (inside.incrementAndGet() > 1) overlaps.incrementAndGet();
                        acquired[i]++;
                        Thread.sleep(5);
                    } finally {
                        inside.decrementAndGet();
                        if (!planted) m.release();
                    }
                } catch (Exception e) {
                    errors.incrementAndGet();
                }
            }
        }, stop);
        int total = 0;
        for (int n : acquired) { total += n; ctx.check(n > 0, "a client never acquired"); }
        ctx.check(overlaps.get() == 0, overlaps.get() + " overlapping holds");
        ctx.check(waitFor(() -> noChildren(cs.get(1).fw, path), 10000), "lock nodes left behind");
        ctx.facts.put("overlaps", overlaps.get());
        ctx.figures.put("acquisitions", total);
        ctx.figures.put("errors", errors.get());
    }

    static void semaphore() throws Exception {
        String path = base + "/semaphore";
        List<Client> cs = clients("semaphore", 5);
        AtomicInteger inside = new AtomicInteger(), most = new AtomicInteger(), errors = new AtomicInteger();
        int[] acquired = new int[cs.size()];
        AtomicBoolean stop = new AtomicBoolean();
        during(cs.size(), i -> {
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(cs.get(i).fw, path, 2);
            while (!stop.get()) {
                try {
                    Lease lease = sem.acquire(10, TimeUnit.SECONDS);
                    if (lease == null) continue;
                    try {
                        most.accumulateAndGet(inside.incrementAndGet(), Math::max);
                        acquired[i]++;
                        Thread.sleep(20);
                    } finally {
                        inside.decrementAndGet();
                        sem.returnLease(lease);
                    }
                } catch (Exception e) {
                    errors.incrementAndGet();
                }
            }
        }, stop);
        for (int n : acquired) ctx.check(n > 0, "a client never got a lease");
        ctx.check(most.get() <= 2, most.get() + " leases held at once (max 2)");
        ctx.check(most.get() == 2, "never two leases at once");
        ctx.facts.put("most_leases_at_once", most.get());
        ctx.figures.put("leases", java.util.Arrays.stream(acquired).sum());
        ctx.figures.put("errors", errors.get());
    }

    static void readWriteLock() throws Exception {
        String path = base + "/rwlock";
        List<Client> cs = clients("rwlock", 4);
        Object state = new Object();
        int[] counts = new int[4];  // readers, writers, violations, most readers
        AtomicInteger reads = new AtomicInteger(), writes = new AtomicInteger(), errors = new AtomicInteger();
        AtomicBoolean stop = new AtomicBoolean();
        during(cs.size(), i -> {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(cs.get(i).fw, path);
            Random random = new Random(i);
            while (!stop.get()) {
                boolean write = random.nextInt(10) < 3;
                InterProcessMutex lock = write ? rw.writeLock() : rw.readLock();
                try {
                    if (!lock.acquire(10, TimeUnit.SECONDS)) continue;
                    try {
                        synchronized (state) {
                            if (write) {
                                if (counts[0] > 0 || counts[1] > 0) counts[2]++;
                                counts[1]++;
                            } else {
                                if (counts[1] > 0) counts[2]++;
                                counts[0]++;
                                counts[3] = Math.max(counts[3], counts[0]);
                            }
                        }
                        (write ? writes : reads).incrementAndGet();
                        Thread.sleep(write ? 5 : 20);
                    } finally {
                        synchronized (state) { counts[write ? 1 : 0]--; }
                        lock.release();
                    }
                } catch (Exception e) {
                    errors.incrementAndGet();
                }
            }
        }, stop);
        ctx.check(counts[2] == 0, counts[2] + " exclusion violations");
        ctx.check(reads.get() > 0 && writes.get() > 0, "reads " + reads + ", writes " + writes);
        ctx.check(counts[3] >= 2, "readers never shared the lock");
        ctx.facts.put("violations", counts[2]);
        ctx.facts.put("readers_shared", counts[3] >= 2);
        ctx.figures.put("reads", reads.get());
        ctx.figures.put("writes", writes.get());
        ctx.figures.put("errors", errors.get());
    }

    /** 21 nodes created (5 with two children each when nested), 10 changed, 5 deleted; the
     * midpoint after the creates; the model of what is left (relative path -> data). */
    static Map<String, String> writeTree(CuratorFramework fw, String root, boolean nested) throws Exception {
        Map<String, String> model = new TreeMap<>();
        try {
            fw.create().creatingParentsIfNeeded().forPath(root, b("root"));
        } catch (KeeperException.NodeExistsException e) {
            fw.setData().forPath(root, b("root"));  // PathChildrenCache makes its path itself
        }
        model.put("", "root");
        for (int i = 0; i < 21; i++) {
            String name = String.format("/n%02d", i);
            fw.create().forPath(root + name, b("v0-" + i));
            model.put(name, "v0-" + i);
            if (nested && i < 5) {
                for (String child : new String[] {"/c0", "/c1"}) {
                    fw.create().forPath(root + name + child, b("c-" + i));
                    model.put(name + child, "c-" + i);
                }
            }
        }
        midpoint();
        for (int i = 5; i < 15; i++) {
            String name = String.format("/n%02d", i);
            fw.setData().forPath(root + name, b("v1-" + i));
            model.put(name, "v1-" + i);
        }
        for (int i = 15; i < 20; i++) {
            String name = String.format("/n%02d", i);
            fw.delete().forPath(root + name);
            model.remove(name);
        }
        if (nested) {
            fw.setData().forPath(root + "/n00/c0", b("c-changed"));
            model.put("/n00/c0", "c-changed");
            fw.delete().forPath(root + "/n01/c1");
            model.remove("/n01/c1");
        }
        return model;
    }

    static void compareCache(String root, Map<String, String> model, Client writer, CacheView view) throws Exception {
        Map<String, String> tree = readTree(writer.fw, root);
        if (!model.containsKey("")) tree.remove("");  // a children-only view
        ctx.check(tree.equals(model), "the server's tree is not what was written: " + tree);
        Map<String, String> expected = new TreeMap<>(model);
        if (plant && ctx.scenario.equals("curator_cache")) expected.put("/phantom", "planted");
        boolean converged = waitFor(() -> view.read().equals(expected), plant ? 2000 : 15000);
        Map<String, String> seen = view.read();
        ctx.check(converged, "cache holds " + seen.size() + " of " + expected.size() + " nodes" + (seen.size() < 40 ? ": " + seen : ""));
        ctx.facts.put("nodes", expected.size());
        ctx.facts.put("cache_matches", converged);
    }

    interface CacheView { Map<String, String> read() throws Exception; }

    static Map<String, String> relative(String root, Collection<ChildData> data) {
        Map<String, String> out = new TreeMap<>();
        for (ChildData d : data) out.put(d.getPath().substring(root.length()), s(d.getData()));
        return out;
    }

    static void curatorCache() throws Exception {
        String root = base + "/cc";
        Client reader = new Client("reader"), writer = new Client("writer");
        CuratorCache cache = CuratorCache.build(reader.fw, root);
        CountDownLatch initialized = new CountDownLatch(1);
        AtomicInteger events = new AtomicInteger();
        cache.listenable().addListener(CuratorCacheListener.builder().forInitialized(initialized::countDown)
            .forAll((type, before, after) -> events.incrementAndGet()).build());
        cache.start();
        ctx.check(initialized.await(15, TimeUnit.SECONDS), "cache initialized");
        Map<String, String> model = writeTree(writer.fw, root, true);
        compareCache(root, model, writer, () -> relative(root, cache.stream().collect(java.util.stream.Collectors.toList())));
        ctx.figures.put("events", events.get());
        cache.close();
    }

    static void treeCache() throws Exception {
        String root = base + "/tc";
        Client reader = new Client("reader"), writer = new Client("writer");
        TreeCache cache = new TreeCache(reader.fw, root);
        CountDownLatch initialized = new CountDownLatch(1);
        cache.getListenable().addListener((f, event) -> { if (event.getType() == TreeCacheEvent.Type.INITIALIZED) initialized.countDown(); });
        cache.start();
        ctx.check(initialized.await(15, TimeUnit.SECONDS), "cache initialized");
        Map<String, String> model = writeTree(writer.fw, root, true);
        compareCache(root, model, writer, () -> {
            Map<String, String> out = new TreeMap<>();
            walk(cache, root, root, out);
            return out;
        });
        cache.close();
    }

    static void walk(TreeCache cache, String root, String path, Map<String, String> out) {
        ChildData data = cache.getCurrentData(path);
        if (data == null) return;
        out.put(path.substring(root.length()), s(data.getData()));
        Map<String, ChildData> children = cache.getCurrentChildren(path);
        if (children != null) for (String child : children.keySet()) walk(cache, root, path + "/" + child, out);
    }

    static void pathChildrenCache() throws Exception {
        String root = base + "/pcc";
        Client reader = new Client("reader"), writer = new Client("writer");
        PathChildrenCache cache = new PathChildrenCache(reader.fw, root, true);
        cache.start(PathChildrenCache.StartMode.BUILD_INITIAL_CACHE);
        Map<String, String> model = writeTree(writer.fw, root, false);
        model.remove("");  // children only
        compareCache(root, model, writer, () -> relative(root, cache.getCurrentData()));
        cache.close();
    }

    static void nodeCache() throws Exception {
        String path = base + "/nc/node";
        Client reader = new Client("reader"), writer = new Client("writer");
        NodeCache cache = new NodeCache(reader.fw, path);
        AtomicInteger changes = new AtomicInteger();
        cache.getListenable().addListener(changes::incrementAndGet);
        cache.start(true);
        ctx.check(cache.getCurrentData() == null, "no data before the node exists");
        writer.fw.create().creatingParentsIfNeeded().forPath(path, b("a"));
        ctx.check(waitFor(() -> "a".equals(data(cache)), 15000), "saw the create");
        for (int i = 0; i < 10; i++) writer.fw.setData().forPath(path, b("v" + i));
        ctx.check(waitFor(() -> "v9".equals(data(cache)), 15000), "saw the last change, not " + data(cache));
        midpoint();
        writer.fw.delete().forPath(path);
        ctx.check(waitFor(() -> cache.getCurrentData() == null, 15000), "saw the delete");
        // the parent is a container (NodeCache made it): empty now, a reaper may take it first
        writer.fw.create().creatingParentsIfNeeded().forPath(path, b("z"));
        ctx.check(waitFor(() -> "z".equals(data(cache)) && cache.getCurrentData().getStat().getVersion() == 0, 15000), "saw the re-create");
        ctx.check(changes.get() >= 3, "listener called " + changes.get() + " times");
        ctx.facts.put("final", data(cache));
        ctx.figures.put("listener_calls", changes.get());
        cache.close();
    }

    static String data(NodeCache cache) {
        ChildData d = cache.getCurrentData();
        return d == null ? null : s(d.getData());
    }

    static void atomicLong() throws Exception {
        String path = base + "/counter";
        List<Client> cs = clients("counter", 4);
        AtomicInteger successes = new AtomicInteger(), failures = new AtomicInteger(), errors = new AtomicInteger();
        int each = 40;
        List<Thread> threads = new ArrayList<>();
        for (Client c : cs) {
            DistributedAtomicLong counter = new DistributedAtomicLong(c.fw, path, new RetryNTimes(1000, 5));
            Thread t = new Thread(() -> {
                for (int k = 0; k < each; k++) {
                    try {
                        AtomicValue<Long> v = counter.increment();
                        (v.succeeded() ? successes : failures).incrementAndGet();
                    } catch (Exception e) {
                        errors.incrementAndGet();
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        waitFor(() -> successes.get() + failures.get() + errors.get() >= each * cs.size() / 2, 60000);
        midpoint();
        for (Thread t : threads) t.join(120000);
        long value = new DistributedAtomicLong(cs.get(0).fw, path, new RetryNTimes(10, 100)).get().postValue();
        // an increment whose reply a killed server never sent may have been applied and retried
        int ambiguous = errors.get() + ctx.suspensions("counter");
        ctx.check(value >= successes.get() && value - successes.get() <= ambiguous,
                  "counter " + value + " after " + successes + " successful increments (" + ambiguous + " ambiguous)");
        ctx.check(successes.get() + ambiguous >= each * cs.size(), failures + " increments gave up");
        ctx.facts.put("increments", each * cs.size());
        ctx.figures.put("value", value);
        ctx.figures.put("successes", successes.get());
        ctx.figures.put("errors", errors.get());
    }

    static void queue() throws Exception {
        String path = base + "/queue";
        QueueSerializer<String> serializer = new QueueSerializer<String>() {
            public byte[] serialize(String item) { return b(item); }
            public String deserialize(byte[] bytes) { return s(bytes); }
        };
        Map<String, AtomicInteger> consumed = new ConcurrentHashMap<>();
        AtomicInteger total = new AtomicInteger();
        List<DistributedQueue<String>> queues = new ArrayList<>();
        for (Client c : clients("consumer", 2)) {
            QueueConsumer<String> consumer = new QueueConsumer<String>() {
                public void consumeMessage(String item) {
                    consumed.computeIfAbsent(item, k -> new AtomicInteger()).incrementAndGet();
                    total.incrementAndGet();
                }
                public void stateChanged(CuratorFramework f, ConnectionState state) {}
            };
            DistributedQueue<String> q = QueueBuilder.builder(c.fw, consumer, serializer, path).buildQueue();
            q.start();
            queues.add(q);
        }
        int producers = 2, each = 100;
        AtomicInteger puts = new AtomicInteger(), errors = new AtomicInteger();
        List<Thread> threads = new ArrayList<>();
        for (Client c : clients("producer", producers)) {
            DistributedQueue<String> q = QueueBuilder.builder(c.fw, null, serializer, path).putInBackground(false).buildQueue();
            q.start();
            queues.add(q);
            Thread t = new Thread(() -> {
                for (int k = 0; k < each; k++) {
                    try {
                        q.put(c.name + "-" + k);
                        puts.incrementAndGet();
                    } catch (Exception e) {
                        errors.incrementAndGet();
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        waitFor(() -> puts.get() + errors.get() >= producers * each / 2, 60000);
        midpoint();
        for (Thread t : threads) t.join(120000);
        waitFor(() -> consumed.size() >= producers * each, 15000);
        Thread.sleep(500);  // late duplicates
        int missing = 0, duplicated = 0;
        for (int p = 0; p < producers; p++) {
            for (int k = 0; k < each; k++) {
                AtomicInteger n = consumed.get("producer" + p + "-" + k);
                if (n == null) missing++;
                else if (n.get() > 1) duplicated++;
            }
        }
        int ambiguous = errors.get() + ctx.suspensions("");
        // Curator's queue is not exactly-once across a lost connection: a retried put may add an
        // item twice, a consumer's retried delete may find it gone and drop it
        ctx.check(missing + duplicated <= ambiguous, missing + " items lost, " + duplicated + " delivered twice (" + ambiguous + " ambiguous)");
        ctx.facts.put("items", producers * each);
        ctx.figures.put("delivered", total.get());
        ctx.figures.put("missing", missing);
        ctx.figures.put("duplicated", duplicated);
        for (DistributedQueue<String> q : queues) q.close();
    }

    static void persistentNode() throws Exception {
        String path = base + "/pn/eph";
        Client owner = new Client("owner"), other = new Client("other");
        PersistentNode node = new PersistentNode(owner.fw, CreateMode.EPHEMERAL, false, path, b("pn"));
        node.start();
        ctx.check(node.waitForInitialCreate(15, TimeUnit.SECONDS), "created");
        ctx.check(waitFor(() -> ownedBy(other, path, owner.sessionId()), 5000), "ephemeral of the owner's session");
        midpoint();
        other.fw.delete().forPath(path);
        ctx.check(waitFor(() -> ownedBy(other, path, owner.sessionId()), 15000), "re-created after a delete");
        long session = owner.sessionId();
        byte[] password = owner.fw.getZookeeperClient().getZooKeeper().getSessionPasswd();
        ctx.planned = "the harness closed the owner's session";
        CountDownLatch attached = new CountDownLatch(1);
        ZooKeeper thief = new ZooKeeper(connect, SESSION_MS, e -> { if (e.getState() == Watcher.Event.KeeperState.SyncConnected) attached.countDown(); }, session, password);
        ctx.check(attached.await(20, TimeUnit.SECONDS), "attached to the owner's session");
        thief.close();
        ctx.check(waitFor(() -> owner.fw.getZookeeperClient().isConnected() && owner.sessionId() != session, 40000), "owner has a new session");
        ctx.check(waitFor(() -> ownedBy(other, path, owner.sessionId()), 20000), "re-created in the new session");
        Thread.sleep(500);
        ctx.planned = null;
        node.close();
        ctx.check(waitFor(() -> other.fw.checkExists().forPath(path) == null, 10000), "deleted on close");
    }

    static boolean ownedBy(Client reader, String path, long session) throws Exception {
        Stat stat = reader.fw.checkExists().forPath(path);
        return stat != null && stat.getEphemeralOwner() == session;
    }

    static void persistentTtlNode() throws Exception {
        String path = base + "/ttl";
        long ttl = 2000;
        Client owner = new Client("owner"), other = new Client("other");
        PersistentTtlNode node = new PersistentTtlNode(owner.fw, path, ttl, b("ttl-data"));
        node.start();
        ctx.check(node.waitForInitialCreate(15, TimeUnit.SECONDS), "created");
        String touch = path + "/" + PersistentTtlNode.DEFAULT_CHILD_NODE_NAME;
        ctx.check(waitFor(() -> other.fw.checkExists().forPath(touch) != null, 10000), "touch node exists");
        Stat container = other.fw.checkExists().forPath(path), child = other.fw.checkExists().forPath(touch);
        ctx.facts.put("container_owner", container == null ? null : Long.toHexString(container.getEphemeralOwner()));
        ctx.facts.put("touch_owner", child == null ? null : Long.toHexString(child.getEphemeralOwner()));
        ctx.facts.put("touch_data", s(other.fw.getData().forPath(touch)));
        long mzxid = child == null ? 0 : child.getMzxid();
        ctx.check(waitFor(() -> other.fw.checkExists().forPath(touch).getMzxid() > mzxid, ttl * 2), "touched again within the TTL");
        midpoint();
        other.fw.delete().deletingChildrenIfNeeded().forPath(path);
        ctx.check(waitFor(() -> other.fw.checkExists().forPath(touch) != null, 15000), "re-created after a delete");
        Thread.sleep(ttl + 500);
        ctx.check(other.fw.checkExists().forPath(touch) != null, "still there after its TTL while touched");
        node.close();
        if (reapMs <= 1000) {
            ctx.check(waitFor(() -> other.fw.checkExists().forPath(path) == null, ttl + 4 * reapMs + 8000), "gone after close (TTL then container reaped)");
            ctx.facts.put("reaped_after_close", true);
        } else {
            ctx.facts.put("reaped_after_close", "not checked: reaping every " + reapMs + " ms");
        }
    }

    static void sharedCount() throws Exception {
        String path = base + "/count";
        List<Client> cs = clients("count", 3);
        List<SharedCount> counts = new ArrayList<>();
        for (Client c : cs) {
            SharedCount count = new SharedCount(c.fw, path, 0);
            count.start();
            counts.add(count);
        }
        SharedCount first = counts.get(0);
        VersionedValue<Integer> v = first.getVersionedValue();
        boolean set = first.trySetCount(v, 1);
        boolean staleRefused = !first.trySetCount(v, 2);
        ctx.check(set, "trySetCount with the current version");
        ctx.check(staleRefused, "trySetCount with a stale version was refused");
        ctx.facts.put("first_set", set);
        ctx.facts.put("stale_refused", staleRefused);
        AtomicInteger successes = new AtomicInteger(), errors = new AtomicInteger();
        AtomicBoolean stop = new AtomicBoolean();
        during(counts.size(), i -> {
            SharedCount count = counts.get(i);
            while (!stop.get()) {
                try {
                    VersionedValue<Integer> now = count.getVersionedValue();
                    if (count.trySetCount(now, now.getValue() + 1)) successes.incrementAndGet();
                    else Thread.sleep(2);
                } catch (Exception e) {
                    errors.incrementAndGet();
                }
            }
        }, stop);
        int value = ByteBuffer.wrap(cs.get(0).fw.getData().forPath(path)).getInt();
        int ambiguous = errors.get() + ctx.suspensions("count");
        ctx.check(value - 1 >= successes.get() && value - 1 - successes.get() <= ambiguous,
                  "count " + value + " after 1 + " + successes + " successful sets (" + ambiguous + " ambiguous)");
        ctx.check(waitFor(() -> counts.stream().allMatch(c -> c.getCount() == value), 15000), "every SharedCount sees " + value);
        ctx.figures.put("value", value);
        ctx.figures.put("successes", successes.get());
        for (SharedCount count : counts) count.close();
    }

    static void transaction() throws Exception {
        String tx = base + "/tx";
        Client c = new Client("tx");
        CuratorFramework fw = c.fw;
        fw.create().creatingParentsIfNeeded().forPath(tx, b("root"));
        List<CuratorOp> ops = List.of(
            fw.transactionOp().create().forPath(tx + "/a", b("a")),
            fw.transactionOp().create().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath(tx + "/s-", b("s")),
            fw.transactionOp().setData().forPath(tx, b("root2")),
            fw.transactionOp().check().withVersion(0).forPath(tx + "/a"));
        List<Object> results = new ArrayList<>();
        for (CuratorTransactionResult r : fw.transaction().forOperations(ops)) {
            results.add(obj("type", r.getType().name(), "path", r.getForPath().substring(base.length()),
                            "result", r.getResultPath() == null ? null : r.getResultPath().substring(base.length()),
                            "version", r.getResultStat() == null ? null : r.getResultStat().getVersion(), "error", r.getError()));
        }
        ctx.facts.put("committed", results);
        ctx.check(results.size() == 4, "four results");
        ctx.check(fw.checkExists().forPath(tx + "/a") != null && fw.getChildren().forPath(tx).size() == 2 && "root2".equals(s(fw.getData().forPath(tx))), "all four applied");
        midpoint();
        failing(fw, "missing_delete", KeeperException.Code.NONODE, List.of(0, -101), List.of(tx + "/c"),
                fw.transactionOp().create().forPath(tx + "/c"), fw.transactionOp().delete().forPath(tx + "/missing"));
        failing(fw, "bad_version", KeeperException.Code.BADVERSION, List.of(0, -103, -2), List.of(tx + "/d", tx + "/e"),
                fw.transactionOp().create().forPath(tx + "/d"), fw.transactionOp().check().withVersion(99).forPath(tx + "/a"),
                fw.transactionOp().create().forPath(tx + "/e"));
        failing(fw, "node_exists", KeeperException.Code.NODEEXISTS, List.of(0, -110), List.of(),
                fw.transactionOp().setData().forPath(tx + "/a", b("changed")), fw.transactionOp().create().forPath(tx + "/a"));
        ctx.check("a".equals(s(fw.getData().forPath(tx + "/a"))), "a failed transaction's setData was applied");
        failing(fw, "not_empty", KeeperException.Code.NOTEMPTY, List.of(-111, -2), List.of(),
                fw.transactionOp().delete().forPath(tx), fw.transactionOp().create().forPath(tx + "/f"));
    }

    static void failing(CuratorFramework fw, String name, KeeperException.Code code, List<Integer> expected, List<String> absent, CuratorOp... ops) throws Exception {
        List<Integer> codes = new ArrayList<>();
        String thrown = "none";
        try {
            fw.transaction().forOperations(ops);
        } catch (KeeperException e) {
            thrown = e.code().name();
            if (e.getResults() != null) for (OpResult r : e.getResults()) codes.add(r instanceof OpResult.ErrorResult ? ((OpResult.ErrorResult) r).getErr() : 0);
        }
        ctx.facts.put(name, obj("error", thrown, "results", codes));
        ctx.check(thrown.equals(code.name()), name + ": " + thrown + " instead of " + code.name());
        ctx.check(codes.equals(expected), name + ": results " + codes + " instead of " + expected);
        for (String path : absent) ctx.check(fw.checkExists().forPath(path) == null, name + ": " + path + " was created");
    }

    /** The bug report's client: a LeaderLatch and a CuratorCache on one client, another client
     * writing the tree for holdSeconds; no SUSPENDED, no lost leadership, the cache exact. */
    static void hold() throws Exception {
        String root = base + "/hold-tree";
        Client holder = new Client("holder"), writer = new Client("writer");
        writer.fw.create().creatingParentsIfNeeded().forPath(root, b("root"));
        LeaderLatch latch = new LeaderLatch(holder.fw, base + "/hold-latch", "holder");
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() {}
            public void notLeader() { ctx.loss("holder"); }
        });
        latch.start();
        CuratorCache cache = CuratorCache.build(holder.fw, root);
        CountDownLatch initialized = new CountDownLatch(1);
        cache.listenable().addListener(CuratorCacheListener.builder().forInitialized(initialized::countDown).build());
        cache.start();
        ctx.check(latch.await(20, TimeUnit.SECONDS), "leadership taken");
        ctx.check(initialized.await(15, TimeUnit.SECONDS), "cache initialized");
        // 30 nodes (5 with two children), 15 changed three times, 8 deleted: 113 writes spread evenly
        List<Body> steps = new ArrayList<>();
        for (int i = 0; i < 30; i++) {
            String name = String.format("%s/n%02d", root, i);
            int k = i;
            steps.add(() -> writer.fw.create().forPath(name, b("v0-" + k)));
            if (i < 5) for (String child : new String[] {"/c0", "/c1"}) steps.add(() -> writer.fw.create().forPath(name + child, b("c")));
        }
        for (int round = 1; round <= 3; round++) {
            for (int i = 5; i < 20; i++) {
                String name = String.format("%s/n%02d", root, i);
                String value = "v" + round + "-" + i;
                steps.add(() -> writer.fw.setData().forPath(name, b(value)));
            }
        }
        for (int i = 22; i < 30; i++) {
            String name = String.format("%s/n%02d", root, i);
            steps.add(() -> writer.fw.delete().forPath(name));
        }
        long start = System.currentTimeMillis(), span = holdSeconds * 1000L;
        int notLeaderSamples = 0, samples = 0, writeErrors = 0;
        boolean midpointDone = false;
        for (int i = 0; i < steps.size(); i++) {
            long due = start + span * i / steps.size();
            while (System.currentTimeMillis() < due) {
                samples++;
                if (!latch.hasLeadership()) notLeaderSamples++;
                Thread.sleep(Math.min(100, Math.max(1, due - System.currentTimeMillis())));
            }
            if (!midpointDone && i >= steps.size() / 2) { midpoint(); midpointDone = true; }
            try {
                steps.get(i).run();
            } catch (KeeperException.NodeExistsException | KeeperException.NoNodeException e) {
                // a retried write whose first try was applied (a server killed under it)
            } catch (Exception e) {
                writeErrors++;
            }
        }
        while (System.currentTimeMillis() < start + span) {
            samples++;
            if (!latch.hasLeadership()) notLeaderSamples++;
            Thread.sleep(100);
        }
        Map<String, String> tree = readTree(writer.fw, root);
        boolean converged = waitFor(() -> relative(root, cache.stream().collect(java.util.stream.Collectors.toList())).equals(tree), 15000);
        ctx.check(converged, "cache holds " + cache.size() + " of " + tree.size() + " nodes");
        ctx.check(latch.hasLeadership(), "leadership held at the end");
        ctx.facts.put("tree_nodes", tree.size());
        ctx.facts.put("cache_matches", converged);
        ctx.facts.put("leader_at_end", latch.hasLeadership());
        ctx.figures.put("cache_nodes", cache.size());
        ctx.figures.put("writes", steps.size());
        ctx.figures.put("write_errors", writeErrors);
        ctx.figures.put("not_leader_samples", notLeaderSamples);
        ctx.figures.put("samples", samples);
        ctx.figures.put("seconds", holdSeconds);
        cache.close();
        latch.close();
    }

    /** The cut-over (docs/operations.md, "Moving from ZooKeeper"): a LeaderLatch whose client
     * counts only a lost session as an error (SessionConnectionStateErrorPolicy: with the
     * standard policy any SUSPENDED gives up leadership, and a whole ensemble stopped for a
     * move, or for ZooKeeper's own restart, suspends every client), holding its leadership while
     * the driver moves the ensemble under it at the "midpoint" (onto zabby) and "back" (onto
     * ZooKeeper again).  After each: the same session, the same latch node, still the leader. */
    static void cutover() throws Exception {
        Client holder = new Client("holder", CUTOVER_SESSION_MS, new SessionConnectionStateErrorPolicy());
        LeaderLatch latch = new LeaderLatch(holder.fw, base + "/cutover-latch", "holder");
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() {}
            public void notLeader() { ctx.loss("holder"); }
        });
        latch.start();
        ctx.check(latch.await(20, TimeUnit.SECONDS), "leadership taken");
        long session = holder.sessionId();
        String node = latch.getOurPath();
        ctx.facts.put("latch_node", node.substring(base.length()));
        for (String phase : new String[] {"midpoint", "back"}) {
            handshake(phase);
            boolean connected = waitFor(() -> holder.fw.getZookeeperClient().isConnected() && holder.fw.checkExists().forPath(node) != null, 60000);
            ctx.check(connected, phase + ": not connected again, or the latch node is gone");
            ctx.check(holder.sessionId() == session, phase + ": a new session");
            ctx.check(node.equals(latch.getOurPath()), phase + ": the latch node changed");
            ctx.check(latch.hasLeadership(), phase + ": leadership lost");
            ctx.facts.put(phase + "_session_kept", holder.sessionId() == session);
            ctx.facts.put(phase + "_leader", latch.hasLeadership());
        }
        latch.close();
    }

    /** The rolling replacement (docs/operations.md, "Replacing ZooKeeper one server at a time"):
     * the driver replaces or restarts one server at each "step" handshake, until it answers "end".
     * Two LeaderLatches, one per client: "holder" counts only a lost session as an error
     * (SessionConnectionStateErrorPolicy) and must keep its session, its latch node and its
     * leadership through every step; "standard" gives leadership up on any SUSPENDED (Curator's
     * default policy) and takes it again once reconnected, its losses recorded for the driver to
     * judge (each must follow a disconnection of its client).  Neither session may change. */
    static void rolling() throws Exception {
        Client holder = new Client("holder", CUTOVER_SESSION_MS, new SessionConnectionStateErrorPolicy());
        Client standard = new Client("standard", CUTOVER_SESSION_MS, new StandardConnectionStateErrorPolicy());
        LeaderLatch held = recordedLatch(holder, base + "/rolling-holder");
        LeaderLatch retaken = recordedLatch(standard, base + "/rolling-standard");
        ctx.check(held.await(20, TimeUnit.SECONDS) && retaken.await(20, TimeUnit.SECONDS), "leadership taken");
        long session = holder.sessionId(), standardSession = standard.sessionId();
        String node = held.getOurPath();
        int steps = 0;
        while (midpointMode && !"end".equals(handshake("step"))) {  // (without a driver: no step)
            if (++steps > ROLLING_STEPS_MAX) throw new IllegalStateException("the driver never said end");
            String step = "step " + steps + ": ";
            boolean back = waitFor(() -> holder.fw.getZookeeperClient().isConnected() && holder.fw.checkExists().forPath(node) != null, 60000);
            ctx.check(back, step + "the holder is not connected again, or its latch node is gone");
            ctx.check(holder.sessionId() == session, step + "the holder has a new session");
            ctx.check(node.equals(held.getOurPath()), step + "the holder's latch node changed");
            ctx.check(held.hasLeadership(), step + "the holder lost leadership");
            ctx.check(waitFor(retaken::hasLeadership, 60000), step + "the standard latch did not lead again");
            ctx.check(standard.sessionId() == standardSession, step + "the standard latch's client has a new session");
        }
        ctx.figures.put("steps", steps);
        ctx.facts.put("holder_session_kept", holder.sessionId() == session);
        ctx.facts.put("standard_session_kept", standard.sessionId() == standardSession);
        held.close();
        retaken.close();
    }

    static LeaderLatch recordedLatch(Client client, String path) throws Exception {
        LeaderLatch latch = new LeaderLatch(client.fw, path, client.name);
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() {}
            public void notLeader() { ctx.loss(client.name); }
        });
        latch.start();
        return latch;
    }

    // --- main ------------------------------------------------------------------------------------

    static final Map<String, Body> SCENARIOS = new LinkedHashMap<>();
    static {
        SCENARIOS.put("leader_latch", CuratorSuite::leaderLatch);
        SCENARIOS.put("leader_selector", CuratorSuite::leaderSelector);
        SCENARIOS.put("mutex", CuratorSuite::mutex);
        SCENARIOS.put("semaphore", CuratorSuite::semaphore);
        SCENARIOS.put("rw_lock", CuratorSuite::readWriteLock);
        SCENARIOS.put("curator_cache", CuratorSuite::curatorCache);
        SCENARIOS.put("tree_cache", CuratorSuite::treeCache);
        SCENARIOS.put("path_children_cache", CuratorSuite::pathChildrenCache);
        SCENARIOS.put("node_cache", CuratorSuite::nodeCache);
        SCENARIOS.put("atomic_long", CuratorSuite::atomicLong);
        SCENARIOS.put("queue", CuratorSuite::queue);
        SCENARIOS.put("persistent_node", CuratorSuite::persistentNode);
        SCENARIOS.put("persistent_ttl_node", CuratorSuite::persistentTtlNode);
        SCENARIOS.put("shared_count", CuratorSuite::sharedCount);
        SCENARIOS.put("transaction", CuratorSuite::transaction);
        SCENARIOS.put("hold", CuratorSuite::hold);
        SCENARIOS.put("cutover", CuratorSuite::cutover);
        SCENARIOS.put("rolling", CuratorSuite::rolling);
    }

    public static void main(String[] args) throws Exception {
        connect = args[0];
        List<String> names = new ArrayList<>();
        for (String name : args[1].split(",")) names.add(name.equals("all") ? String.join(",", SCENARIOS.keySet()) : name);
        for (int i = 2; i < args.length; i++) {
            String a = args[i];
            if (a.startsWith("--seconds=")) seconds = Integer.parseInt(a.substring(10));
            else if (a.startsWith("--hold=")) holdSeconds = Integer.parseInt(a.substring(7));
            else if (a.startsWith("--reap-ms=")) reapMs = Long.parseLong(a.substring(10));
            else if (a.equals("--midpoint")) midpointMode = true;
            else if (a.equals("--plant")) plant = true;
            else throw new IllegalArgumentException("unknown option " + a);
        }
        base = "/curator-suite-" + Long.toHexString(System.currentTimeMillis());
        for (String name : String.join(",", names).split(",")) {
            Body body = SCENARIOS.get(name);
            ctx = new Ctx(name);
            if (body == null) {
                ctx.failures.add("unknown scenario");
            } else {
                handshake("start");
                try {
                    body.run();
                } catch (Throwable e) {
                    ctx.failures.add("exception: " + e);
                } finally {
                    synchronized (ctx.clients) { for (Client c : ctx.clients) c.close(); }
                }
            }
            System.out.println(json(obj("scenario", name, "passed", ctx.failures.isEmpty(), "failures", ctx.failures, "facts", ctx.facts,
                                        "figures", ctx.figures, "states", ctx.states, "leadership_losses", ctx.losses, "errors", ctx.errors,
                                        "t_start", ctx.start, "t_end", System.currentTimeMillis())));
            System.out.flush();
        }
        System.exit(0);
    }

    // --- JSON --------------------------------------------------------------------------------------

    static String json(Object o) {
        StringBuilder out = new StringBuilder();
        write(out, o);
        return out.toString();
    }

    static void write(StringBuilder out, Object o) {
        if (o == null) {
            out.append("null");
        } else if (o instanceof Map) {
            out.append('{');
            boolean first = true;
            synchronized (o) {
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                    if (!first) out.append(',');
                    first = false;
                    write(out, String.valueOf(e.getKey()));
                    out.append(':');
                    write(out, e.getValue());
                }
            }
            out.append('}');
        } else if (o instanceof Collection) {
            out.append('[');
            boolean first = true;
            synchronized (o) {
                for (Object item : (Collection<?>) o) {
                    if (!first) out.append(',');
                    first = false;
                    write(out, item);
                }
            }
            out.append(']');
        } else if (o instanceof Number || o instanceof Boolean) {
            out.append(o);
        } else {
            out.append('"');
            for (char ch : o.toString().toCharArray()) {
                if (ch == '"' || ch == '\\') out.append('\\').append(ch);
                else if (ch < 0x20) out.append(String.format("\\u%04x", (int) ch));
                else out.append(ch);
            }
            out.append('"');
        }
    }
}
