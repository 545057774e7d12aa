// The differential's Java leg: ZooKeeper's own client (Debian's libzookeeper-java), driven
// one command per stdin line (JSON), one answer per stdout line (JSON).  harness.differential
// .java_client runs it; see that module for the commands and what an answer holds.
//
// Every request goes through the client's async API, so its callback runs on the client's
// event thread, where watch events are delivered too: each session's log holds events and
// replies in the order the server sent them, as kazoo's instrumented connection records it.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.Transaction;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.admin.ZooKeeperAdmin;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Id;
import org.apache.zookeeper.data.Stat;

public final class JavaClientDriver {
    static final JsonNodeFactory JSON = JsonNodeFactory.instance;
    static final ObjectMapper MAPPER = new ObjectMapper();
    static final long REPLY_TIMEOUT_S = 30;

    /** One session: the client and what its event thread logged, drained by "drain". */
    static final class Session implements Watcher {
        final List<ArrayNode> log = new ArrayList<>();
        final CountDownLatch connected = new CountDownLatch(1);
        ZooKeeperAdmin zk;

        @Override
        public void process(WatchedEvent event) {
            if (event.getType() == Event.EventType.None) {
                if (event.getState() == Event.KeeperState.SyncConnected) {
                    connected.countDown();
                }
                return; // connection states are the client's own, not the server's events
            }
            ArrayNode entry = JSON.arrayNode().add("event").add(event.getType().getIntValue())
                    .add(event.getState().getIntValue()).add(event.getPath());
            synchronized (log) {
                log.add(entry);
            }
        }

        void reply(int rc) {
            synchronized (log) {
                log.add(JSON.arrayNode().add("reply").add(rc));
            }
        }
    }

    final String hosts;
    final Map<String, Session> sessions = new HashMap<>();

    JavaClientDriver(String hosts) {
        this.hosts = hosts;
    }

    public static void main(String[] args) throws Exception {
        JavaClientDriver driver = new JavaClientDriver(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        out.println("{\"ready\":true}");
        String line;
        while ((line = in.readLine()) != null) {
            ObjectNode answer = JSON.objectNode();
            try {
                answer.set("ok", driver.handle(MAPPER.readTree(line)));
            } catch (Exception e) {
                answer.put("fail", e.toString());
            }
            out.println(MAPPER.writeValueAsString(answer));
        }
        for (Session session : driver.sessions.values()) {
            session.zk.close();
        }
    }

    JsonNode handle(JsonNode command) throws Exception {
        String label = command.path("label").asText();
        switch (command.get("cmd").asText()) {
            case "open":
                return open(label, command.get("auth"));
            case "close":
                sessions.remove(label).zk.close();
                return JSON.nullNode();
            case "drain":
                return drain();
            case "op":
                return run(sessions.get(label), command.get("kind").asText(), command.get("args"));
            case "read_all":
                return readAll();
            default:
                throw new IllegalArgumentException("unknown command " + command);
        }
    }

    JsonNode open(String label, JsonNode auth) throws Exception {
        Session session = new Session();
        session.zk = new ZooKeeperAdmin(hosts, (int) TimeUnit.SECONDS.toMillis(REPLY_TIMEOUT_S), session);
        if (!session.connected.await(REPLY_TIMEOUT_S, TimeUnit.SECONDS)) {
            session.zk.close();
            throw new IllegalStateException("session " + label + " did not connect");
        }
        if (auth != null && !auth.isNull()) {
            session.zk.addAuthInfo("digest", auth.asText().getBytes(StandardCharsets.UTF_8));
        }
        sessions.put(label, session);
        return JSON.numberNode(session.zk.getSessionId());
    }

    JsonNode drain() {
        ObjectNode logs = JSON.objectNode();
        for (Map.Entry<String, Session> item : sessions.entrySet()) {
            ArrayNode entries = logs.putArray(item.getKey());
            synchronized (item.getValue().log) {
                item.getValue().log.forEach(entries::add);
                item.getValue().log.clear();
            }
        }
        return logs;
    }

    /** An exists("/") on every session: its reply comes after every event the server owes it. */
    JsonNode readAll() throws Exception {
        List<CompletableFuture<JsonNode>> replies = new ArrayList<>();
        for (Session session : sessions.values()) {
            CompletableFuture<JsonNode> reply = new CompletableFuture<>();
            session.zk.exists("/", false, (rc, path, ctx, stat) -> {
                session.reply(rc);
                reply.complete(JSON.nullNode());
            }, null);
            replies.add(reply);
        }
        for (CompletableFuture<JsonNode> reply : replies) {
            reply.get(REPLY_TIMEOUT_S, TimeUnit.SECONDS);
        }
        return JSON.nullNode();
    }

    JsonNode run(Session session, String kind, JsonNode args) throws Exception {
        try {
            return perform(session, kind, args);
        } catch (KeeperException e) { // refused by the client itself (a bad create mode)
            return error(e.code().intValue());
        } catch (IllegalArgumentException e) { // refused by the client itself (a bad path, a bad TTL)
            return JSON.arrayNode().add("error").add(e.getClass().getSimpleName());
        }
    }

    /** A reply logged (on the event thread, in wire order) and the op's result: {@code ok} on success. */
    static void answer(Session s, CompletableFuture<JsonNode> result, int rc, java.util.function.Supplier<JsonNode> ok) {
        s.reply(rc);
        result.complete(rc != 0 ? error(rc) : ok.get());
    }

    JsonNode perform(Session s, String kind, JsonNode a) throws Exception {
        CompletableFuture<JsonNode> result = new CompletableFuture<>();
        ZooKeeper zk = s.zk;
        switch (kind) {
            case "create": {
                String path = a.get(0).asText();
                CreateMode mode = CreateMode.fromFlag(a.get(3).asInt());
                long ttl = a.get(4).asLong();
                if (a.get(5).asBoolean() || mode.isTTL()) {
                    boolean withStat = a.get(5).asBoolean();
                    zk.create(path, bytes(a.get(1)), acl(a.get(2)), mode, (rc, p, ctx, name, stat) -> answer(s, result, rc, () -> tuple("created", name, withStat ? stat(stat) : JSON.nullNode())), null, ttl);
                } else {
                    zk.create(path, bytes(a.get(1)), acl(a.get(2)), mode, (rc, p, ctx, name) -> answer(s, result, rc, () -> tuple("created", name, JSON.nullNode())), null);
                }
                break;
            }
            case "delete":
                zk.delete(a.get(0).asText(), a.get(1).asInt(), (rc, p, ctx) -> answer(s, result, rc, () -> tuple("ok")), null);
                break;
            case "set":
                zk.setData(a.get(0).asText(), bytes(a.get(1)), a.get(2).asInt(), (rc, p, ctx, stat) -> answer(s, result, rc, () -> tuple("stat", stat(stat))), null);
                break;
            case "set_acl":
                zk.setACL(a.get(0).asText(), acl(a.get(1)), a.get(2).asInt(), (rc, p, ctx, stat) -> answer(s, result, rc, () -> tuple("stat", stat(stat))), null);
                break;
            case "get":
                zk.getData(a.get(0).asText(), a.get(1).asBoolean(), (rc, p, ctx, data, stat) -> answer(s, result, rc, () -> tuple("data", data(data), stat(stat))), null);
                break;
            case "exists":
                zk.exists(a.get(0).asText(), a.get(1).asBoolean(), (rc, p, ctx, stat) -> {
                    s.reply(rc);
                    boolean missing = rc == KeeperException.Code.NONODE.intValue();
                    result.complete(missing ? tuple("none") : rc != 0 ? error(rc) : tuple("stat", stat(stat)));
                }, null);
                break;
            case "children":
                if (a.get(2).asBoolean()) {
                    zk.getChildren(a.get(0).asText(), a.get(1).asBoolean(), (rc, p, ctx, children, stat) -> answer(s, result, rc, () -> tuple("children", sorted(children), stat(stat))), null);
                } else {
                    zk.getChildren(a.get(0).asText(), a.get(1).asBoolean(), (rc, p, ctx, children) -> answer(s, result, rc, () -> tuple("children", sorted(children), JSON.nullNode())), null);
                }
                break;
            case "get_acl":
                zk.getACL(a.get(0).asText(), new Stat(), (rc, p, ctx, acl, stat) -> answer(s, result, rc, () -> tuple("acl", acl(acl), stat(stat))), null);
                break;
            case "sync":
                zk.sync(a.get(0).asText(), (rc, p, ctx) -> answer(s, result, rc, () -> tuple("sync", p)), null);
                break;
            case "multi":
                multi(s, a, result);
                break;
            case "multi_read": {
                List<Op> reads = new ArrayList<>();
                for (JsonNode read : a.get(0)) {
                    String path = read.get(1).asText();
                    reads.add(read.get(0).asText().equals("get") ? Op.getData(path) : Op.getChildren(path));
                }
                zk.multi(reads, (rc, p, ctx, results) -> {
                    s.reply(rc);
                    result.complete(results == null ? error(rc) : tuple("multi_read", opResults(results)));
                }, null);
                break;
            }
            case "ephemerals":
                zk.getEphemerals(a.get(0).asText(), (rc, ctx, paths) -> answer(s, result, rc, () -> tuple("ephemerals", sorted(paths))), null);
                break;
            case "all_children":
                zk.getAllChildrenNumber(a.get(0).asText(), (rc, p, ctx, number) -> answer(s, result, rc, () -> tuple("count", JSON.numberNode(number))), null);
                break;
            case "add_watch":
                zk.addWatch(a.get(0).asText(), s, a.get(1).asInt() == 1 ? AddWatchMode.PERSISTENT_RECURSIVE : AddWatchMode.PERSISTENT,
                        (rc, p, ctx) -> answer(s, result, rc, () -> tuple("ok")), null);
                break;
            case "remove_watches": // opcode removeWatches: every watch of the type on the path
                zk.removeAllWatches(a.get(0).asText(), Watcher.WatcherType.fromInt(a.get(1).asInt()), false, (rc, p, ctx) -> answer(s, result, rc, () -> tuple("ok")), null);
                break;
            case "check_watches": // opcode checkWatches: this session's watcher
                zk.removeWatches(a.get(0).asText(), s, Watcher.WatcherType.fromInt(a.get(1).asInt()), false, (rc, p, ctx) -> answer(s, result, rc, () -> tuple("ok")), null);
                break;
            case "who_am_i": {
                ArrayNode who = JSON.arrayNode();
                List<String> names = new ArrayList<>();
                for (ClientInfo info : zk.whoAmI()) { // no async form in 3.8
                    names.add(info.getAuthScheme() + "\u0000" + info.getUser());
                }
                names.sort(null);
                for (String name : names) {
                    String[] parts = name.split("\u0000", 2);
                    who.add(JSON.arrayNode().add(parts[0]).add(parts[1]));
                }
                s.reply(0);
                return tuple("who", who);
            }
            case "add_auth":
                zk.addAuthInfo("digest", a.get(0).asText().getBytes(StandardCharsets.UTF_8));
                return tuple("ok");
            case "get_config":
                zk.getConfig(a.get(0).asBoolean(), (rc, p, ctx, data, stat) -> answer(s, result, rc, () -> tuple("data", data(data), stat(stat))), null);
                break;
            case "reconfig":
                s.zk.reconfigure(text(a.get(0)), text(a.get(1)), text(a.get(2)), a.get(3).asLong(), (rc, p, ctx, data, stat) -> answer(s, result, rc, () -> tuple("data", data(data), stat(stat))), null);
                break;
            default:
                throw new IllegalArgumentException("unknown op kind " + kind);
        }
        return result.get(REPLY_TIMEOUT_S, TimeUnit.SECONDS);
    }

    /** A multi through zk.multi, or through the client's Transaction builder when asked (no TTL there). */
    void multi(Session s, JsonNode a, CompletableFuture<JsonNode> result) throws KeeperException {
        org.apache.zookeeper.AsyncCallback.MultiCallback callback = (rc, p, ctx, results) -> {
            s.reply(rc);
            result.complete(results == null ? error(rc) : tuple("multi", opResults(results)));
        };
        boolean throughTransaction = a.get(1).asBoolean();
        for (JsonNode sub : a.get(0)) {
            throughTransaction &= !(sub.get(0).asText().equals("create") && CreateMode.fromFlag(sub.get(4).asInt()).isTTL());
        }
        Transaction transaction = s.zk.transaction();
        List<Op> ops = new ArrayList<>();
        for (JsonNode sub : a.get(0)) {
            String path = sub.get(1).asText();
            switch (sub.get(0).asText()) {
                case "create": {
                    CreateMode mode = CreateMode.fromFlag(sub.get(4).asInt());
                    if (throughTransaction) {
                        transaction.create(path, bytes(sub.get(2)), acl(sub.get(3)), mode);
                    } else if (mode.isTTL()) {
                        ops.add(Op.create(path, bytes(sub.get(2)), acl(sub.get(3)), mode, sub.get(5).asLong()));
                    } else {
                        ops.add(Op.create(path, bytes(sub.get(2)), acl(sub.get(3)), mode));
                    }
                    break;
                }
                case "delete":
                    if (throughTransaction) {
                        transaction.delete(path, sub.get(2).asInt());
                    } else {
                        ops.add(Op.delete(path, sub.get(2).asInt()));
                    }
                    break;
                case "set":
                    if (throughTransaction) {
                        transaction.setData(path, bytes(sub.get(2)), sub.get(3).asInt());
                    } else {
                        ops.add(Op.setData(path, bytes(sub.get(2)), sub.get(3).asInt()));
                    }
                    break;
                default:
                    if (throughTransaction) {
                        transaction.check(path, sub.get(2).asInt());
                    } else {
                        ops.add(Op.check(path, sub.get(2).asInt()));
                    }
            }
        }
        if (throughTransaction) {
            transaction.commit(callback, null);
        } else {
            s.zk.multi(ops, callback, null);
        }
    }

    static ArrayNode opResults(List<OpResult> results) {
        ArrayNode out = JSON.arrayNode();
        for (OpResult item : results) {
            if (item instanceof OpResult.ErrorResult) {
                int err = ((OpResult.ErrorResult) item).getErr();
                out.add(error(err));
            } else if (item instanceof OpResult.CreateResult) {
                OpResult.CreateResult created = (OpResult.CreateResult) item;
                out.add(tuple("created", created.getPath(), created.getStat() == null ? JSON.nullNode() : stat(created.getStat())));
            } else if (item instanceof OpResult.SetDataResult) {
                out.add(tuple("stat", stat(((OpResult.SetDataResult) item).getStat())));
            } else if (item instanceof OpResult.GetDataResult) {
                OpResult.GetDataResult got = (OpResult.GetDataResult) item;
                out.add(tuple("data", data(got.getData()), stat(got.getStat())));
            } else if (item instanceof OpResult.GetChildrenResult) {
                out.add(tuple("children", sorted(((OpResult.GetChildrenResult) item).getChildren()), JSON.nullNode()));
            } else {
                out.add(tuple("ok"));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ values
    /** An error by its code (0: rolled back in a multi); the Python side names it. */
    static ArrayNode error(int rc) {
        return JSON.arrayNode().add("error").add(rc);
    }

    static ArrayNode tuple(String tag, Object... items) {
        ArrayNode out = JSON.arrayNode().add(tag);
        for (Object item : items) {
            if (item instanceof JsonNode) {
                out.add((JsonNode) item);
            } else {
                out.add((String) item);
            }
        }
        return out;
    }

    static byte[] bytes(JsonNode value) {
        return value == null || value.isNull() ? null : Base64.getDecoder().decode(value.get("b64").asText());
    }

    static JsonNode data(byte[] value) {
        return value == null ? JSON.nullNode() : JSON.objectNode().put("b64", Base64.getEncoder().encodeToString(value));
    }

    static String text(JsonNode value) {
        return value == null || value.isNull() ? null : value.asText();
    }

    static JsonNode stat(Stat stat) {
        ArrayNode values = JSON.arrayNode().add(stat.getCzxid()).add(stat.getMzxid()).add(stat.getCtime()).add(stat.getMtime())
                .add(stat.getVersion()).add(stat.getCversion()).add(stat.getAversion()).add(stat.getEphemeralOwner())
                .add(stat.getDataLength()).add(stat.getNumChildren()).add(stat.getPzxid());
        return JSON.objectNode().set("stat", values);
    }

    static ArrayNode sorted(List<String> names) {
        List<String> copy = new ArrayList<>(names == null ? List.of() : names);
        copy.sort(null);
        ArrayNode out = JSON.arrayNode();
        copy.forEach(out::add);
        return out;
    }

    static List<ACL> acl(JsonNode entries) {
        List<ACL> acl = new ArrayList<>();
        for (JsonNode entry : entries) {
            acl.add(new ACL(entry.get(0).asInt(), new Id(entry.get(1).asText(), entry.get(2).asText())));
        }
        return acl;
    }

    static ArrayNode acl(List<ACL> acl) {
        ArrayNode out = JSON.arrayNode();
        for (ACL entry : acl) {
            out.add(JSON.arrayNode().add(entry.getPerms()).add(entry.getId().getScheme()).add(entry.getId().getId()));
        }
        return out;
    }
}
