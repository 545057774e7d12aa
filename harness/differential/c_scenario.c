/* A scenario through ZooKeeper's C client (Debian's libzookeeper-mt), run against ZooKeeper 3.8
 * and zabby by harness/differential/c_client.py, which compares the outputs line by line.
 *
 *     c_scenario HOST:PORT[,...] /ROOT THREADS REQUESTS
 *
 * Two sessions take turns, one step at a time (creates of every mode, get/set/exists/children
 * with watches, ACLs and digest auth, multi, ephemerals, errors, null data); every step prints
 * one line, and each watch event a line of its own once both sessions answered a read.  Then
 * THREADS threads issue REQUESTS synchronous requests each, concurrently, on one handle: the
 * threaded adaptor takes each xid before it queues the request, so two threads' requests reach
 * the server in the other order.  Only their outcome counts print.  Session ids, zxids and
 * times are left out (zxids by their relation); children are sorted.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#define MAX_EVENTS 64
#define BUFFER_BYTES 1024

static const char *root;
static int step;
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static char *events[MAX_EVENTS];
static int event_count;
static zhandle_t *sessions[2];
static const char *names[2] = {"a", "b"};

static const char *path_of(const char *relative, char *out) {
    snprintf(out, BUFFER_BYTES, "%s%s", root, strcmp(relative, "/") == 0 ? "" : relative);
    return out;
}

static const char *relative_of(const char *path) {
    size_t n = strlen(root);
    if (strncmp(path, root, n) == 0) return path[n] ? path + n : "/";
    return path;
}

static const char *type_name(int type) {
    if (type == ZOO_CREATED_EVENT) return "created";
    if (type == ZOO_DELETED_EVENT) return "deleted";
    if (type == ZOO_CHANGED_EVENT) return "changed";
    if (type == ZOO_CHILD_EVENT) return "child";
    if (type == ZOO_SESSION_EVENT) return "session";
    return "other";
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *context) {
    (void)zh;
    (void)state;
    if (type == ZOO_SESSION_EVENT || context == NULL) return;
    char *line = malloc(BUFFER_BYTES);
    snprintf(line, BUFFER_BYTES, "   event %s %s %s", (const char *)context, type_name(type), relative_of(path));
    pthread_mutex_lock(&events_lock);
    if (event_count < MAX_EVENTS) events[event_count++] = line; else free(line);
    pthread_mutex_unlock(&events_lock);
}

static pthread_mutex_t settled_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t settled_cond = PTHREAD_COND_INITIALIZER;
static int settled;

static void settled_completion(int rc, const struct Stat *stat, const void *data) {
    (void)rc;
    (void)stat;
    (void)data;
    pthread_mutex_lock(&settled_lock);
    settled++;
    pthread_cond_signal(&settled_cond);
    pthread_mutex_unlock(&settled_lock);
}

/* Both sessions answer an exists, so every event a step caused has been delivered (an async
 * completion runs on the completion thread after the events that arrived before its reply; a
 * synchronous call returns from the I/O thread, possibly before them); then print. */
static void show(int who, const char *format, ...) {
    for (int i = 0; i < 2; i++) {
        if (!sessions[i]) continue;
        pthread_mutex_lock(&settled_lock);
        int before = settled;
        if (zoo_aexists(sessions[i], "/", 0, settled_completion, NULL) == ZOK)
            while (settled == before) pthread_cond_wait(&settled_cond, &settled_lock);
        pthread_mutex_unlock(&settled_lock);
    }
    va_list args;
    va_start(args, format);
    printf("%02d %s ", ++step, names[who]);
    vprintf(format, args);
    printf("\n");
    va_end(args);
    pthread_mutex_lock(&events_lock);
    for (int i = 0; i < event_count; i++) {
        printf("%s\n", events[i]);
        free(events[i]);
    }
    event_count = 0;
    pthread_mutex_unlock(&events_lock);
    fflush(stdout);
}

static const char *describe_stat(const struct Stat *stat, char *out) {
    const char *owner = "0";
    for (int i = 0; i < 2; i++)
        if (sessions[i] && stat->ephemeralOwner == zoo_client_id(sessions[i])->client_id) owner = names[i];
    if (stat->ephemeralOwner && strcmp(owner, "0") == 0) owner = "other";
    snprintf(out, BUFFER_BYTES, "{version=%d cversion=%d aversion=%d dataLength=%d numChildren=%d ephemeralOwner=%s mzxid%sczxid pzxid%sczxid}",
             stat->version, stat->cversion, stat->aversion, stat->dataLength, stat->numChildren, owner,
             stat->mzxid == stat->czxid ? "=" : ">", stat->pzxid == stat->czxid ? "=" : ">");
    return out;
}

static void create(int who, const char *path, const char *data, int length, int flags, struct ACL_vector *acl) {
    char full[BUFFER_BYTES], created[BUFFER_BYTES];
    int rc = zoo_create(sessions[who], path_of(path, full), data, length, acl ? acl : &ZOO_OPEN_ACL_UNSAFE, flags, created, sizeof created);
    if (rc == ZOK) show(who, "create %s flags=%d -> %s", path, flags, relative_of(created));
    else show(who, "create %s flags=%d -> %s", path, flags, zerror(rc));
}

static void get(int who, const char *path, int watch) {
    char full[BUFFER_BYTES], data[BUFFER_BYTES], described[BUFFER_BYTES];
    struct Stat stat;
    int length = sizeof data - 1;
    int rc = zoo_wget(sessions[who], path_of(path, full), watch ? watcher : NULL, watch ? (void *)names[who] : NULL, data, &length, &stat);
    if (rc != ZOK) return show(who, "get %s%s -> %s", path, watch ? " watch" : "", zerror(rc));
    if (length < 0) snprintf(data, sizeof data, "(null)"); else data[length] = 0;
    show(who, "get %s%s -> \"%s\" %s", path, watch ? " watch" : "", data, describe_stat(&stat, described));
}

static void set(int who, const char *path, const char *data, int length, int version) {
    char full[BUFFER_BYTES], described[BUFFER_BYTES];
    struct Stat stat;
    int rc = zoo_set2(sessions[who], path_of(path, full), data, length, version, &stat);
    if (rc != ZOK) return show(who, "set %s v%d -> %s", path, version, zerror(rc));
    show(who, "set %s v%d -> %s", path, version, describe_stat(&stat, described));
}

static void exists(int who, const char *path, int watch) {
    char full[BUFFER_BYTES], described[BUFFER_BYTES];
    struct Stat stat;
    int rc = zoo_wexists(sessions[who], path_of(path, full), watch ? watcher : NULL, watch ? (void *)names[who] : NULL, &stat);
    if (rc != ZOK) return show(who, "exists %s%s -> %s", path, watch ? " watch" : "", zerror(rc));
    show(who, "exists %s%s -> %s", path, watch ? " watch" : "", describe_stat(&stat, described));
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void children(int who, const char *path, int watch) {
    char full[BUFFER_BYTES], listed[BUFFER_BYTES] = "";
    struct String_vector names_found;
    int rc = zoo_wget_children(sessions[who], path_of(path, full), watch ? watcher : NULL, watch ? (void *)names[who] : NULL, &names_found);
    if (rc != ZOK) return show(who, "children %s%s -> %s", path, watch ? " watch" : "", zerror(rc));
    qsort(names_found.data, names_found.count, sizeof(char *), compare_strings);
    for (int i = 0; i < names_found.count; i++) {
        strncat(listed, i ? "," : "", sizeof listed - strlen(listed) - 1);
        strncat(listed, names_found.data[i], sizeof listed - strlen(listed) - 1);
    }
    show(who, "children %s%s -> [%s]", path, watch ? " watch" : "", listed);
    deallocate_String_vector(&names_found);
}

static void delete(int who, const char *path, int version) {
    char full[BUFFER_BYTES];
    show(who, "delete %s v%d -> %s", path, version, zerror(zoo_delete(sessions[who], path_of(path, full), version)));
}

static void get_acl(int who, const char *path) {
    char full[BUFFER_BYTES], described[BUFFER_BYTES], listed[BUFFER_BYTES] = "";
    struct ACL_vector acl;
    struct Stat stat;
    int rc = zoo_get_acl(sessions[who], path_of(path, full), &acl, &stat);
    if (rc != ZOK) return show(who, "getACL %s -> %s", path, zerror(rc));
    for (int i = 0; i < acl.count; i++) {
        char one[BUFFER_BYTES];
        snprintf(one, sizeof one, "%s%s:%s:%d", i ? "," : "", acl.data[i].id.scheme, acl.data[i].id.id, acl.data[i].perms);
        strncat(listed, one, sizeof listed - strlen(listed) - 1);
    }
    show(who, "getACL %s -> [%s] %s", path, listed, describe_stat(&stat, described));
    deallocate_ACL_vector(&acl);
}

static void add_auth(int who, const char *credential) {
    int rc = zoo_add_auth(sessions[who], "digest", credential, strlen(credential), NULL, NULL);
    show(who, "addauth digest %s -> %s", credential, zerror(rc));
}

static void multi(int who, const char *label, int count, zoo_op_t *ops) {
    zoo_op_result_t results[8];
    int rc = zoo_multi(sessions[who], count, ops, results);
    char listed[BUFFER_BYTES] = "";
    for (int i = 0; i < count; i++) {
        char one[64];
        snprintf(one, sizeof one, "%s%d", i ? "," : "", results[i].err);
        strncat(listed, one, sizeof listed - strlen(listed) - 1);
    }
    show(who, "multi %s -> %s [%s]", label, zerror(rc), listed);
}

static zhandle_t *open_session(const char *hosts) {
    zhandle_t *zh = zookeeper_init(hosts, watcher, 30000, NULL, NULL, 0);
    for (int i = 0; zh && i < 400 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++) usleep(50000);
    if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE) {
        printf("no session with %s\n", hosts);
        exit(1);
    }
    return zh;
}

struct burst { int thread, requests, ok, errors; };

/* One thread's share of the burst: creates (null data, then set) and reads on the shared handle. */
static void *burst_thread(void *argument) {
    struct burst *burst = argument;
    char path[BUFFER_BYTES], full[BUFFER_BYTES], data[64];
    for (int i = 0; i < burst->requests; i++) {
        snprintf(path, sizeof path, "/burst/t%d-%d", burst->thread, i);
        path_of(path, full);
        int length = sizeof data;
        struct Stat stat;
        int rc = (i % 3 == 0) ? zoo_create(sessions[0], full, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0)
               : (i % 3 == 1) ? zoo_set(sessions[0], path_of("/burst", full), NULL, -1, -1)
                              : zoo_get(sessions[0], path_of("/burst", full), 0, data, &length, &stat);
        if (rc == ZOK) burst->ok++; else burst->errors++;
    }
    return NULL;
}

static void threaded_burst(int threads, int requests) {
    pthread_t ids[64];
    struct burst bursts[64];
    int ok = 0, errors = 0;
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++) {
        bursts[t] = (struct burst){t, requests, 0, 0};
        pthread_create(&ids[t], NULL, burst_thread, &bursts[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(ids[t], NULL);
        ok += bursts[t].ok;
        errors += bursts[t].errors;
    }
    show(0, "burst %d threads x %d requests -> ok %d errors %d", threads, requests, ok, errors);
}

int main(int argc, char **argv) {
    if (argc != 5 || argv[2][0] != '/') {
        fprintf(stderr, "usage: %s HOST:PORT[,...] /ROOT THREADS REQUESTS\n", argv[0]);
        return 2;
    }
    root = argv[2];
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    sessions[0] = open_session(argv[1]);
    show(0, "connected");
    children(0, "/", 0);
    create(0, "/", "root", 4, 0, NULL);
    sessions[1] = open_session(argv[1]);
    show(1, "connected");
    get(1, "/", 1);
    children(1, "/", 1);
    create(0, "/p", "persistent", 10, 0, NULL);
    create(0, "/p", "again", 5, 0, NULL);
    create(0, "/p/s-", "seq", 3, ZOO_SEQUENCE, NULL);
    create(0, "/p/s-", NULL, -1, ZOO_SEQUENCE, NULL);
    create(0, "/p/e", "eph", 3, ZOO_EPHEMERAL, NULL);
    create(0, "/p/es-", NULL, -1, ZOO_EPHEMERAL | ZOO_SEQUENCE, NULL);
    create(0, "/p/e/child", "x", 1, 0, NULL);
    create(0, "/missing/child", "x", 1, 0, NULL);
    create(0, "/c", "container", 9, ZOO_CONTAINER, NULL);
    children(1, "/p", 1);
    get(1, "/p/s-0000000001", 0);
    get(1, "/p/e", 0);
    exists(1, "/later", 1);
    create(0, "/later", "", 0, 0, NULL);
    exists(1, "/later", 1);
    set(0, "/later", "one", 3, -1);
    set(0, "/later", "two", 3, 1);
    set(0, "/later", "three", 5, 1);
    set(0, "/later", NULL, -1, 2);
    get(0, "/later", 0);
    set(0, "/nothing", "x", 1, -1);
    get(1, "/p", 1);
    set(0, "/p", NULL, -1, 0);
    delete(0, "/p", -1);
    delete(0, "/later", 9);
    delete(0, "/later", -1);
    get_acl(0, "/");
    struct Id alice = {"digest", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E="};  /* base64(sha1("alice:secret")) */
    struct ACL alice_all[] = {{ZOO_PERM_ALL, alice}};
    struct ACL_vector alice_only = {1, alice_all};
    create(0, "/locked", "private", 7, 0, &alice_only);
    get(0, "/locked", 0);
    add_auth(0, "alice:secret");
    get(0, "/locked", 0);
    get_acl(0, "/locked");
    set(1, "/locked", "nope", 4, -1);
    create(0, "/auth", "mine", 4, 0, &ZOO_CREATOR_ALL_ACL);
    get_acl(0, "/auth");
    create(1, "/auth-b", "none", 4, 0, &ZOO_CREATOR_ALL_ACL);
    add_auth(1, "blah");
    create(1, "/blah", "x", 1, 0, &ZOO_CREATOR_ALL_ACL);
    get_acl(1, "/blah");
    char full[4][BUFFER_BYTES], created[BUFFER_BYTES];
    zoo_op_t ok_ops[3];
    zoo_create_op_init(&ok_ops[0], path_of("/t", full[0]), "t", 1, &ZOO_OPEN_ACL_UNSAFE, 0, created, sizeof created);
    zoo_set_op_init(&ok_ops[1], full[0], NULL, -1, 0, NULL);
    zoo_check_op_init(&ok_ops[2], full[0], 1);
    multi(0, "create+set+check", 3, ok_ops);
    children(1, "/t", 1);
    zoo_op_t bad_ops[3];
    zoo_create_op_init(&bad_ops[0], path_of("/t/never", full[1]), NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
    zoo_check_op_init(&bad_ops[1], full[0], 7);
    zoo_delete_op_init(&bad_ops[2], full[0], -1);
    multi(0, "failing check", 3, bad_ops);
    get(0, "/t", 0);
    create(0, "/burst", "", 0, 0, NULL);
    threaded_burst(atoi(argv[3]), atoi(argv[4]));
    children(1, "/c", 0);
    create(1, "/b-eph", "b", 1, ZOO_EPHEMERAL, NULL);
    get(0, "/b-eph", 1);
    zookeeper_close(sessions[1]);
    sessions[1] = NULL;
    show(1, "closed");
    exists(0, "/b-eph", 0);
    children(0, "/p", 0);
    zookeeper_close(sessions[0]);
    sessions[0] = NULL;
    show(0, "closed");
    return 0;
}
