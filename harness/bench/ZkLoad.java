// A small load generator on ZooKeeper's own async Java client (Debian's libzookeeper-java).
//
// Compiled at run time by scripts/bench.py (javac into a cache folder; no class file is ever
// committed) and run as one client process of a benchmark:
//
//   java -cp <zookeeper.jar>:<slf4j-nop.jar>:<build dir> ZkLoad key=value ...
//
// keys: hosts (comma-separated host:port), first, spread (how connection i picks its server:
// "" pins it to host (first + i) % n; "rotate" gives it every host, starting at that one, tried
// in order; "shuffle" gives it every host and lets ZooKeeper's StaticHostProvider shuffle them,
// as an application's connect string does), mode (create|set|get|exists|children|mix|
// latency-write|latency-read|latency-set|churn|watch|fill), conns, inflight (outstanding requests
// per connection), ops (limit for this process), seconds (wall-clock limit), size (value bytes),
// prefix (this process's own folder), path (the shared node of children/watch/fill), count,
// offset and fanout (fill: znodes number offset .. offset+count-1, as path/n<i>, or with
// fanout > 0 as path/d<i / fanout>/n<i % fanout>), readpct (mix).
//
// Protocol with the harness: set-up (connect, create the keys), print "READY", wait for a
// line "GO" on stdin, load, print one line "RESULT {json}" and exit.  watch mode loads until
// a line "STOP" (or the wall-clock limit).  Every loop is bounded by ops and seconds.  The
// result names the server port each connection ended up on ("ports").

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.HostProvider;
import org.apache.zookeeper.data.Stat;

public class ZkLoad {
    static Map<String, String> opt = new HashMap<>();
    static String mode, spread;
    static String[] hosts;
    static int first, conns, inflight, size, readPct;
    static long opsMax, deadlineNs, fillOffset, fanout;
    static double seconds;
    static byte[] value;
    static String prefix, path;
    static final AtomicLong issued = new AtomicLong();
    static final AtomicLong completed = new AtomicLong();
    static final AtomicLong errors = new AtomicLong();
    static volatile long lastDoneNs;
    static long goNs;
    static long[] latencies = new long[0];
    static final AtomicLong latencyCount = new AtomicLong();
    static volatile boolean stopping;
    static final java.util.concurrent.Semaphore closers = new java.util.concurrent.Semaphore(16);
    static final java.util.concurrent.ExecutorService closePool = java.util.concurrent.Executors.newCachedThreadPool();

    static String get(String key, String dflt) {
        return opt.getOrDefault(key, dflt);
    }

    /** Every host, tried in the given order (no shuffle): the "rotate" spread. */
    static final class InOrder implements HostProvider {
        final List<InetSocketAddress> servers = new ArrayList<>();
        int next;

        InOrder(List<String> list) {
            for (String host : list) {
                int colon = host.lastIndexOf(':');
                servers.add(InetSocketAddress.createUnresolved(host.substring(0, colon), Integer.parseInt(host.substring(colon + 1))));
            }
        }

        public int size() { return servers.size(); }

        public InetSocketAddress next(long spinDelay) {
            InetSocketAddress at = servers.get(next++ % servers.size());
            return new InetSocketAddress(at.getHostString(), at.getPort());
        }

        public void onConnected() { }

        public boolean updateServerList(Collection<InetSocketAddress> list, InetSocketAddress current) { return false; }
    }

    static ZooKeeper connect(int index) throws Exception {
        int start = (first + index) % hosts.length;
        List<String> order = new ArrayList<>();
        for (int k = 0; k < hosts.length; k++) {
            order.add(hosts[(start + k) % hosts.length]);
        }
        CountDownLatch up = new CountDownLatch(1);
        Watcher watcher = event -> {
            if (event.getState() == Watcher.Event.KeeperState.SyncConnected) {
                up.countDown();
            }
        };
        String connectString = spread.isEmpty() ? order.get(0) : String.join(",", order);
        ZooKeeper zk = spread.equals("rotate")
            ? new ZooKeeper(connectString, 30000, watcher, false, new InOrder(order))
            : new ZooKeeper(connectString, 30000, watcher);
        if (!up.await(30, TimeUnit.SECONDS)) {
            throw new RuntimeException("no session with " + connectString + " after 30 s");
        }
        return zk;
    }

    static final Pattern REMOTE = Pattern.compile("remoteserver:\\S*:(\\d+)");

    /** The server port the connection is on, from ZooKeeper.toString(); -1 if not known. */
    static int remotePort(ZooKeeper zk) {
        Matcher m = REMOTE.matcher(zk.toString());
        return m.find() ? Integer.parseInt(m.group(1)) : -1;
    }

    static String fillPath(long number) {
        return fanout > 0 ? path + "/d" + (number / fanout) + "/n" + (number % fanout) : path + "/n" + number;
    }

    static void ensure(ZooKeeper zk, String p, byte[] data) throws Exception {
        String at = "";
        String[] parts = p.substring(1).split("/");
        for (int i = 0; i < parts.length; i++) {
            at = at + "/" + parts[i];
            try {
                zk.create(at, i == parts.length - 1 ? data : new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
            } catch (KeeperException.NodeExistsException e) {
                if (i == parts.length - 1 && data.length > 0) {
                    zk.setData(at, data, -1);
                }
            }
        }
    }

    static double cpuSeconds() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() / 1e9;
        }
        return -1;
    }

    /** One lane: at most one request outstanding; its callback issues the next. */
    static final class Lane implements AsyncCallback.StringCallback, AsyncCallback.DataCallback,
            AsyncCallback.StatCallback, AsyncCallback.ChildrenCallback {
        final ZooKeeper zk;
        final int id;
        final String key;
        final CountDownLatch finished;
        long index;
        long startNs;

        Lane(ZooKeeper zk, int id, CountDownLatch finished) {
            this.zk = zk;
            this.id = id;
            this.key = prefix + "/k" + id;
            this.finished = finished;
        }

        void next() {
            long n = issued.incrementAndGet();
            if (stopping || System.nanoTime() >= deadlineNs || n > opsMax) {
                finished.countDown();
                return;
            }
            startNs = System.nanoTime();
            switch (mode) {
                case "create":
                case "latency-write":
                    zk.create(prefix + "/n" + id + "-" + (index++), value, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, (AsyncCallback.StringCallback) this, null);
                    break;
                case "fill":
                    zk.create(fillPath(fillOffset + n - 1), value, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, (AsyncCallback.StringCallback) this, null);
                    break;
                case "set":
                case "latency-set":
                    zk.setData(key, value, -1, (AsyncCallback.StatCallback) this, null);
                    break;
                case "get":
                case "latency-read":
                    zk.getData(key, false, (AsyncCallback.DataCallback) this, null);
                    break;
                case "exists":
                    zk.exists(key, false, (AsyncCallback.StatCallback) this, null);
                    break;
                case "children":
                    zk.getChildren(path, false, (AsyncCallback.ChildrenCallback) this, null);
                    break;
                case "mix":
                    if (ThreadLocalRandom.current().nextInt(100) < readPct) {
                        zk.getData(key, false, (AsyncCallback.DataCallback) this, null);
                    } else {
                        zk.setData(key, value, -1, (AsyncCallback.StatCallback) this, null);
                    }
                    break;
                default:
                    throw new IllegalArgumentException("unknown mode " + mode);
            }
        }

        void done(int rc) {
            long now = System.nanoTime();
            if (rc != 0) {
                errors.incrementAndGet();
            }
            if (mode.startsWith("latency")) {
                long slot = latencyCount.getAndIncrement();
                if (slot < latencies.length) {
                    latencies[(int) slot] = now - startNs;
                }
            }
            completed.incrementAndGet();
            lastDoneNs = now;
            next();
        }

        public void processResult(int rc, String p, Object ctx, String name) { done(rc); }
        public void processResult(int rc, String p, Object ctx, byte[] data, Stat stat) { done(rc); }
        public void processResult(int rc, String p, Object ctx, Stat stat) { done(rc); }
        public void processResult(int rc, String p, Object ctx, List<String> children) { done(rc); }
    }

    public static void main(String[] args) throws Exception {
        for (String arg : args) {
            int eq = arg.indexOf('=');
            opt.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        mode = get("mode", "get");
        spread = get("spread", "");
        fillOffset = Long.parseLong(get("offset", "0"));
        fanout = Long.parseLong(get("fanout", "0"));
        hosts = get("hosts", "127.0.0.1:2181").split(",");
        first = Integer.parseInt(get("first", "0"));
        conns = Integer.parseInt(get("conns", "1"));
        inflight = Integer.parseInt(get("inflight", "1"));
        opsMax = Long.parseLong(get("ops", "1000000"));
        seconds = Double.parseDouble(get("seconds", "10"));
        size = Integer.parseInt(get("size", "100"));
        readPct = Integer.parseInt(get("readpct", "90"));
        prefix = get("prefix", "/bench/w0");
        path = get("path", "/bench/shared");
        value = new byte[size];
        java.util.Arrays.fill(value, (byte) 'v');
        if (mode.startsWith("latency")) {
            latencies = new long[(int) Math.min(opsMax, 2_000_000)];
        }
        if (mode.equals("fill")) {
            opsMax = Long.parseLong(get("count", "1000"));
        }
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));

        List<ZooKeeper> zks = new ArrayList<>();
        boolean churn = mode.equals("churn");
        boolean watch = mode.equals("watch");
        int opened = churn ? 1 : conns;
        for (int i = 0; i < opened; i++) {
            zks.add(connect(i));
        }
        ZooKeeper admin = zks.get(0);
        if (mode.equals("fill") || watch || mode.equals("children")) {
            ensure(admin, path, watch ? value : new byte[0]);
            if (mode.equals("fill") && fanout > 0 && opsMax > 0) {
                for (long d = fillOffset / fanout; d <= (fillOffset + opsMax - 1) / fanout; d++) {
                    ensure(admin, path + "/d" + d, new byte[0]);
                }
            }
        } else {
            ensure(admin, prefix, new byte[0]);
        }
        if (mode.equals("set") || mode.equals("get") || mode.equals("exists") || mode.equals("mix") || mode.equals("latency-read") || mode.equals("latency-set")) {
            for (int lane = 0; lane < conns * inflight; lane++) {
                ensure(admin, prefix + "/k" + lane, value);
            }
        }
        if (mode.equals("children")) {
            int expect = Integer.parseInt(get("expect", "0"));
            int found = admin.getChildren(path, false).size();
            if (expect > 0 && found != expect) {
                System.err.println(path + " has " + found + " children, expected " + expect);
                System.exit(3);
            }
        }
        if (churn) {
            zks.get(0).close();
            zks.clear();
        }
        // watch mode: every connection arms a data watch on `path`, re-armed on each event
        List<List<Long>> received = new ArrayList<>();
        if (watch) {
            for (ZooKeeper zk : zks) {
                List<Long> times = new ArrayList<>();
                received.add(times);
                Watcher[] self = new Watcher[1];
                self[0] = (WatchedEvent event) -> {
                    if (event.getType() == Watcher.Event.EventType.NodeDataChanged) {
                        synchronized (times) {
                            times.add(System.nanoTime());
                        }
                        if (!stopping) {
                            zk.getData(path, self[0], (rc, p, ctx, data, stat) -> { }, null);
                        }
                    }
                };
                zk.getData(path, self[0], null);
            }
        }
        System.out.println("READY");
        System.out.flush();
        String line = stdin.readLine();
        if (line == null || !line.trim().equals("GO")) {
            System.exit(2);
        }
        double cpu0 = cpuSeconds();
        goNs = System.nanoTime();
        lastDoneNs = goNs;
        deadlineNs = goNs + (long) (seconds * 1e9);
        if (watch) {
            while (true) {
                String cmd = stdin.readLine();
                if (cmd == null || cmd.trim().equals("STOP")) {
                    break;
                }
            }
            stopping = true;
            lastDoneNs = System.nanoTime();
        } else if (churn) {
            CountDownLatch finished = new CountDownLatch(conns);
            for (int t = 0; t < conns; t++) {
                final int thread = t;
                Thread worker = new Thread(() -> {
                    long i = 0;
                    while (System.nanoTime() < deadlineNs && issued.incrementAndGet() <= opsMax) {
                        try {
                            ZooKeeper zk = connect(thread);
                            zk.create(prefix + "/e" + thread + "-" + (i++), value, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
                            // ZooKeeper.close() returns ~100 ms after the server answered the
                            // closeSession (a client-side sleep in its socket clean-up): close on
                            // a pool of closers so the lane goes on; at most 16 pending closes.
                            closers.acquire();
                            closePool.execute(() -> {
                                try {
                                    zk.close();
                                    completed.incrementAndGet();
                                    lastDoneNs = System.nanoTime();
                                } catch (Exception e) {
                                    errors.incrementAndGet();
                                } finally {
                                    closers.release();
                                }
                            });
                        } catch (Exception e) {
                            errors.incrementAndGet();
                        }
                    }
                    finished.countDown();
                });
                worker.setDaemon(true);
                worker.start();
            }
            finished.await((long) (seconds + 60), TimeUnit.SECONDS);
            closePool.shutdown();
            closePool.awaitTermination(30, TimeUnit.SECONDS);
        } else {
            CountDownLatch finished = new CountDownLatch(conns * inflight);
            int laneId = 0;
            List<Lane> lanes = new ArrayList<>();
            for (ZooKeeper zk : zks) {
                for (int k = 0; k < inflight; k++) {
                    lanes.add(new Lane(zk, laneId++, finished));
                }
            }
            for (Lane lane : lanes) {
                lane.next();
            }
            if (!finished.await((long) (seconds + 60), TimeUnit.SECONDS)) {
                stopping = true;
            }
        }
        double elapsed = (lastDoneNs - goNs) / 1e9;
        double cpu = cpuSeconds() - cpu0;
        StringBuilder out = new StringBuilder();
        out.append("{\"ops\":").append(completed.get())
           .append(",\"errors\":").append(errors.get())
           .append(",\"elapsed_s\":").append(elapsed)
           .append(",\"cpu_s\":").append(cpu)
           .append(",\"go_ns\":").append(goNs);
        out.append(",\"ports\":[");
        for (int c = 0; c < zks.size(); c++) {
            if (c > 0) out.append(',');
            out.append(remotePort(zks.get(c)));
        }
        out.append(']');
        if (mode.startsWith("latency")) {
            int n = (int) Math.min(latencyCount.get(), latencies.length);
            out.append(",\"lat_us\":[");
            for (int i = 0; i < n; i++) {
                if (i > 0) out.append(',');
                out.append(latencies[i] / 1000.0);
            }
            out.append(']');
        }
        if (watch) {
            out.append(",\"events_ns\":[");
            for (int c = 0; c < received.size(); c++) {
                if (c > 0) out.append(',');
                out.append('[');
                List<Long> times = received.get(c);
                synchronized (times) {
                    for (int i = 0; i < times.size(); i++) {
                        if (i > 0) out.append(',');
                        out.append(times.get(i));
                    }
                }
                out.append(']');
            }
            out.append(']');
        }
        out.append('}');
        System.out.println("RESULT " + out);
        System.out.flush();
        for (ZooKeeper zk : zks) {
            try {
                zk.close(2000);
            } catch (Exception e) {
                // exiting anyway
            }
        }
        System.exit(0);
    }
}
