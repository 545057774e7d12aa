import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

/**
 * The ZooKeeper side of the harness's watch workload (harness/jepsen/watchers.py): one session of
 * ZooKeeper's own Java client with a persistent recursive watch, as ZooKeeper's client keeps it
 * (re-registered after a reconnect with SetWatches2, without the changes made meanwhile).
 *
 * Usage: RecursiveWatcher hosts path sessionTimeoutMs [reread].  Writes one line per happening:
 * "READY" once the watch is added, "E TYPE PATH" per event (TYPE in kazoo's names: CREATED,
 * DELETED, CHANGED, CHILD, or ZooKeeper's own name for any other), "S STATE" per session state
 * change, "X" when the session expired (a new one is opened and the watch added again, then
 * READY again).  With "reread", after each reconnection it reads the tree under the path again,
 * as Curator's CuratorCache does to learn what changed while the watch was away: "R PATH" for
 * each node found, then "REREAD".  Exits when its standard input closes (its session then expires).
 */
public final class RecursiveWatcher {
    private static final Object OUT_LOCK = new Object();
    private static BufferedWriter out;
    private static volatile ZooKeeper current;
    private static String watchPath;
    private static boolean reread;
    private static volatile boolean disconnected;

    public static void main(String[] args) throws Exception {
        if (args.length != 3 && !(args.length == 4 && args[3].equals("reread"))) {
            System.err.println("usage: RecursiveWatcher hosts path sessionTimeoutMs [reread]");
            System.exit(2);
        }
        out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String hosts = args[0];
        String path = args[1];
        int sessionTimeoutMs = Integer.parseInt(args[2]);
        watchPath = path;
        reread = args.length == 4 && args[3].equals("reread");
        Thread stdinWatch = new Thread(RecursiveWatcher::waitForEndOfInput);
        stdinWatch.setDaemon(true);
        stdinWatch.start();
        while (true) {
            CountDownLatch expired = new CountDownLatch(1);
            ZooKeeper zk = new ZooKeeper(hosts, sessionTimeoutMs, event -> onSessionEvent(event, expired));
            current = zk;
            disconnected = false;
            try {
                addWatchUntilDone(zk, path, expired);
                expired.await();
                say("X");
            } finally {
                zk.close();
            }
        }
    }

    private static void addWatchUntilDone(ZooKeeper zk, String path, CountDownLatch expired) throws InterruptedException {
        Watcher watcher = RecursiveWatcher::onNodeEvent;
        while (expired.getCount() > 0) {
            try {
                zk.addWatch(path, watcher, AddWatchMode.PERSISTENT_RECURSIVE);
                say("READY");
                return;
            } catch (Exception e) {
                expired.await(100, TimeUnit.MILLISECONDS);  // not connected yet, or the call was cut: again
            }
        }
    }

    private static void onSessionEvent(WatchedEvent event, CountDownLatch expired) {
        if (event.getType() != Watcher.Event.EventType.None) {
            return;
        }
        say("S " + event.getState());
        if (event.getState() == Watcher.Event.KeeperState.Expired) {
            expired.countDown();
        } else if (event.getState() == Watcher.Event.KeeperState.Disconnected) {
            disconnected = true;
        } else if (event.getState() == Watcher.Event.KeeperState.SyncConnected && disconnected && reread) {
            disconnected = false;
            ZooKeeper zk = current;
            Thread reader = new Thread(() -> rereadTree(zk));  // not on the event thread, which delivers the events meanwhile
            reader.setDaemon(true);
            reader.start();
        }
    }

    /** Every node under the watched path, read after a reconnection (the watch was added again
     * first, with SetWatches2: what changes from now on is an event). */
    private static void rereadTree(ZooKeeper zk) {
        java.util.ArrayDeque<String> level = new java.util.ArrayDeque<>();
        level.add(watchPath);
        try {
            while (!level.isEmpty()) {
                String parent = level.poll();
                for (String child : zk.getChildren(parent, false)) {
                    String path = (parent.equals("/") ? "" : parent) + "/" + child;
                    say("R " + path);
                    level.add(path);
                }
            }
            say("REREAD");
        } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
            say("REREAD");  // a node deleted while read: what is under it is gone too
        } catch (Exception e) {
            say("REREAD-FAILED " + e);  // disconnected again: the next reconnection reads it all again
        }
    }

    private static void onNodeEvent(WatchedEvent event) {
        if (event.getType() == Watcher.Event.EventType.None) {
            return;  // session states come through the default watcher too
        }
        say("E " + typeName(event.getType()) + " " + event.getPath());
    }

    private static String typeName(Watcher.Event.EventType type) {
        switch (type) {
            case NodeCreated: return "CREATED";
            case NodeDeleted: return "DELETED";
            case NodeDataChanged: return "CHANGED";
            case NodeChildrenChanged: return "CHILD";
            default: return type.name();
        }
    }

    private static void say(String line) {
        synchronized (OUT_LOCK) {
            try {
                out.write(line);
                out.newLine();
                out.flush();
            } catch (java.io.IOException e) {
                System.exit(0);  // nobody reads any more
            }
        }
    }

    private static void waitForEndOfInput() {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            while (in.readLine() != null) {
                // input carries nothing; its end is the signal to stop
            }
        } catch (java.io.IOException e) {
            // closed: stop all the same
        }
        System.exit(0);
    }
}
