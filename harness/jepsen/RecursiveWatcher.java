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
 * Usage: RecursiveWatcher hosts path sessionTimeoutMs.  Writes one line per happening:
 * "READY" once the watch is added, "E TYPE PATH" per event (TYPE in kazoo's names: CREATED,
 * DELETED, CHANGED, CHILD, or ZooKeeper's own name for any other), "S STATE" per session state
 * change, "X" when the session expired (a new one is opened and the watch added again, then
 * READY again).  Exits when its standard input closes (its session then expires).
 */
public final class RecursiveWatcher {
    private static final Object OUT_LOCK = new Object();
    private static BufferedWriter out;

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: RecursiveWatcher hosts path sessionTimeoutMs");
            System.exit(2);
        }
        out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String hosts = args[0];
        String path = args[1];
        int sessionTimeoutMs = Integer.parseInt(args[2]);
        Thread stdinWatch = new Thread(RecursiveWatcher::waitForEndOfInput);
        stdinWatch.setDaemon(true);
        stdinWatch.start();
        while (true) {
            CountDownLatch expired = new CountDownLatch(1);
            ZooKeeper zk = new ZooKeeper(hosts, sessionTimeoutMs, event -> onSessionEvent(event, expired));
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
