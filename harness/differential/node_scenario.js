// A scenario through node-zookeeper-client (npm), run against ZooKeeper 3.8 and against zabby by
// harness/differential/node_client.py, which compares the two outputs line by line.
//
//     node node_scenario.js HOST:PORT[,...] ROOT
//
// Three sessions (a, b, c) take turns, one step at a time: creates of every mode the client has,
// get/set/exists/getChildren with watches, ACLs and addauth, transactions, ephemerals, errors,
// sequential nodes, closes.  Every step prints one line; each watch event prints a line of its
// own, after its step, once every session has answered a read (so an event a step caused has
// arrived).  What differs by nature between two servers is left out of the output: session ids
// are named by their session (a, b, c), zxids shown by their relation to each other, times not
// at all; children are sorted (ZooKeeper's order is a hash set's).
'use strict';

const zookeeper = require('node-zookeeper-client');
const crypto = require('crypto');

const [hosts, root] = process.argv.slice(2);
if (!hosts || !root || !root.startsWith('/')) {
    console.error('usage: node node_scenario.js HOST:PORT[,...] /ROOT');
    process.exit(2);
}
const { ACL, Id, Permission, CreateMode } = zookeeper;
const STEP_TIMEOUT_MS = 20000;
const sessions = {};  // name -> client
const sessionNames = {};  // session id (hex) -> name
const pendingEvents = {};  // name -> lines not yet printed
let step = 0;

function digestId(user, password) {
    const hash = crypto.createHash('sha1').update(`${user}:${password}`).digest('base64');
    return new Id('digest', `${user}:${hash}`);
}

function describeStat(stat) {
    if (!stat) return 'null';
    const owner = stat.ephemeralOwner.toString('hex');
    const ownerName = owner === '0000000000000000' ? '0' : (sessionNames[owner] || 'other');
    const czxid = stat.czxid.toString('hex'), mzxid = stat.mzxid.toString('hex'), pzxid = stat.pzxid.toString('hex');
    return `{version=${stat.version} cversion=${stat.cversion} aversion=${stat.aversion} dataLength=${stat.dataLength} ` +
        `numChildren=${stat.numChildren} ephemeralOwner=${ownerName} mzxid${mzxid === czxid ? '=' : '>'}czxid ` +
        `pzxid${pzxid === czxid ? '=' : '>'}czxid}`;
}

function describeError(error) {
    return typeof error.getName === 'function' ? `error ${error.getName()}(${error.getCode()})` : `error ${error.message}`;
}

function describeData(data) {
    return data === null || data === undefined ? 'null' : JSON.stringify(data.toString('utf8'));
}

function describeAcls(acls) {
    return '[' + acls.map((acl) => `${acl.id.scheme}:${acl.id.id}:${acl.permission}`).join(', ') + ']';
}

function relative(path) {
    return path.startsWith(root) ? path.slice(root.length) || '/' : path;
}

function watcher(name, label) {
    return (event) => {
        pendingEvents[name].push(`   event ${name} ${label} ${event.getName()} ${relative(event.getPath())}`);
    };
}

// One client call as a promise of its callback's arguments (error first).
function call(client, method, ...args) {
    return new Promise((resolve) => {
        const timer = setTimeout(() => resolve([new Error(`no answer in ${STEP_TIMEOUT_MS} ms`)]), STEP_TIMEOUT_MS);
        client[method](...args, (...answer) => {
            clearTimeout(timer);
            resolve(answer);
        });
    });
}

async function open(name) {
    const client = zookeeper.createClient(hosts, { sessionTimeout: 30000, retries: 0 });
    pendingEvents[name] = [];
    await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`session ${name} not connected in ${STEP_TIMEOUT_MS} ms`)), STEP_TIMEOUT_MS);
        client.once('connected', () => {
            clearTimeout(timer);
            resolve();
        });
        client.connect();
    });
    sessions[name] = client;
    sessionNames[client.getSessionId().toString('hex')] = name;
    return `connected ${client.getState().getName()}`;
}

// Every open session answers an exists: each event a step caused has reached its client.
async function settle() {
    for (const name of Object.keys(sessions)) {
        await call(sessions[name], 'exists', '/');
    }
}

function show(name, text) {
    step += 1;
    console.log(`${String(step).padStart(2, '0')} ${name} ${text}`);
}

async function run(name, label, method, args, describe) {
    const [error, ...results] = await call(sessions[name], method, ...args);
    await settle();
    show(name, `${label} -> ${error ? describeError(error) : describe(...results)}`);
    for (const other of Object.keys(pendingEvents).sort()) {
        for (const line of pendingEvents[other].splice(0)) console.log(line);
    }
}

const p = (path) => (path === '/' ? root : root + path);
const buf = (text) => Buffer.from(text);
const OPEN = ACL.OPEN_ACL_UNSAFE;

function create(name, path, data, acls, mode) {
    return run(name, `create ${path} ${mode}`, 'create', [p(path), data, acls || OPEN, mode], (created) => relative(created));
}
function getData(name, path, watch) {
    const args = watch ? [p(path), watcher(name, `data${path}`)] : [p(path)];
    return run(name, `getData ${path}${watch ? ' watch' : ''}`, 'getData', args, (data, stat) => `${describeData(data)} ${describeStat(stat)}`);
}
function setData(name, path, data, version) {
    return run(name, `setData ${path} ${describeData(data)} v${version}`, 'setData', [p(path), data, version], (stat) => describeStat(stat));
}
function exists(name, path, watch) {
    const args = watch ? [p(path), watcher(name, `exists${path}`)] : [p(path)];
    return run(name, `exists ${path}${watch ? ' watch' : ''}`, 'exists', args, (stat) => describeStat(stat));
}
function getChildren(name, path, watch) {
    const args = watch ? [p(path), watcher(name, `children${path}`)] : [p(path)];
    return run(name, `getChildren ${path}${watch ? ' watch' : ''}`, 'getChildren', args,
        (children, stat) => `[${children.map(relative).sort().join(',')}] ${describeStat(stat)}`);
}
function remove(name, path, version) {
    return run(name, `remove ${path} v${version}`, 'remove', [p(path), version], () => 'ok');
}
function getACL(name, path) {
    return run(name, `getACL ${path}`, 'getACL', [p(path)], (acls, stat) => `${describeAcls(acls)} ${describeStat(stat)}`);
}
function setACL(name, path, acls, version) {
    return run(name, `setACL ${path} ${describeAcls(acls)} v${version}`, 'setACL', [p(path), acls, version], (stat) => describeStat(stat));
}
function describeResult(result) {
    if (result.err) return `err ${result.err}`;
    if (result.path) return `type ${result.type} ${relative(result.path)}`;
    if (result.stat) return `type ${result.type} ${describeStat(result.stat)}`;
    return `type ${result.type}`;
}
async function commit(name, label, build) {
    const tx = build(sessions[name].transaction());
    const [error, results] = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve([new Error(`no answer in ${STEP_TIMEOUT_MS} ms`)]), STEP_TIMEOUT_MS);
        tx.commit((...answer) => {
            clearTimeout(timer);
            resolve(answer);
        });
    });
    await settle();
    const described = results ? ' [' + results.map(describeResult).join(', ') + ']' : '';
    show(name, `transaction ${label} -> ${error ? describeError(error) : 'ok'}${described}`);
    for (const other of Object.keys(pendingEvents).sort()) {
        for (const line of pendingEvents[other].splice(0)) console.log(line);
    }
}
async function addAuth(name, scheme, auth) {
    sessions[name].addAuthInfo(scheme, buf(auth));
    await settle();
    show(name, `addAuthInfo ${scheme} ${auth}`);
}
async function close(name) {
    const client = sessions[name];
    await new Promise((resolve) => {
        const timer = setTimeout(resolve, STEP_TIMEOUT_MS);
        client.once('disconnected', () => {
            clearTimeout(timer);
            resolve();
        });
        client.close();
    });
    delete sessions[name];
    await settle();
    show(name, 'close');
    for (const other of Object.keys(pendingEvents).sort()) {
        for (const line of pendingEvents[other].splice(0)) console.log(line);
    }
}

async function scenario() {
    const { PERSISTENT, PERSISTENT_SEQUENTIAL, EPHEMERAL, EPHEMERAL_SEQUENTIAL } = CreateMode;
    show('a', await open('a'));
    // the session's first request (xid 0 from this client): a getChildren of a node not there yet
    await getChildren('a', '/', false);
    await create('a', '/', buf('root'), OPEN, PERSISTENT);
    show('b', await open('b'));
    await getData('b', '/', true);
    await getChildren('b', '/', true);
    await create('a', '/p', buf('persistent'), OPEN, PERSISTENT);
    await create('a', '/p', buf('again'), OPEN, PERSISTENT);
    await create('a', '/p/s-', buf('seq'), OPEN, PERSISTENT_SEQUENTIAL);
    await create('a', '/p/s-', buf('seq'), OPEN, PERSISTENT_SEQUENTIAL);
    await create('a', '/p/e', buf('eph'), OPEN, EPHEMERAL);
    await create('a', '/p/es-', null, OPEN, EPHEMERAL_SEQUENTIAL);
    await create('a', '/p/e/child', buf('x'), OPEN, PERSISTENT);
    await create('a', '/missing/child', buf('x'), OPEN, PERSISTENT);
    await getChildren('b', '/p', true);
    await getData('b', '/p/e', false);
    await getData('b', '/p/es-0000000003', false);
    await exists('b', '/later', true);
    await create('a', '/later', buf(''), OPEN, PERSISTENT);
    await exists('b', '/later', true);
    await setData('a', '/later', buf('one'), -1);
    await setData('a', '/later', buf('two'), 1);
    await setData('a', '/later', buf('three'), 1);
    await getData('a', '/later', false);
    await setData('a', '/nothing', buf('x'), -1);
    await getData('a', '/nothing', false);
    await getData('b', '/p', true);
    await setData('a', '/p', buf(''), 0);
    await getData('b', '/p', false);
    await remove('a', '/p', -1);
    await remove('a', '/later', 5);
    await remove('a', '/later', 3);
    await remove('a', '/later', -1);
    await getACL('a', '/');
    const aliceAcl = [new ACL(Permission.ALL, digestId('alice', 'secret'))];
    await create('a', '/locked', buf('private'), aliceAcl, PERSISTENT);
    await getData('a', '/locked', false);
    await getACL('a', '/locked');
    await addAuth('a', 'digest', 'alice:secret');
    await getData('a', '/locked', false);
    await getACL('a', '/locked');
    await setACL('a', '/locked', [new ACL(Permission.READ, Id.ANYONE_ID_UNSAFE || new Id('world', 'anyone')), ...aliceAcl], 0);
    await getData('b', '/locked', false);
    await setData('b', '/locked', buf('nope'), -1);
    await setACL('a', '/locked', aliceAcl, 0);
    await create('a', '/auth-acl', buf('mine'), [new ACL(Permission.ALL, new Id('auth', ''))], PERSISTENT);
    await getACL('a', '/auth-acl');
    await create('b', '/auth-acl-b', buf('none'), [new ACL(Permission.ALL, new Id('auth', ''))], PERSISTENT);
    await create('a', '/bad-acl', buf('x'), [new ACL(Permission.ALL, new Id('digest', 'no-hash'))], PERSISTENT);
    await addAuth('b', 'digest', 'blah');
    await create('b', '/blah', buf('x'), [new ACL(Permission.ALL, new Id('auth', ''))], PERSISTENT);
    await getACL('b', '/blah');
    await commit('a', 'create+setData+check', (tx) => tx.create(p('/t'), buf('t'), OPEN, PERSISTENT).setData(p('/t'), buf('t2'), 0).check(p('/t'), 1)
        .create(p('/t/seq-'), buf(''), OPEN, PERSISTENT_SEQUENTIAL));
    await getChildren('b', '/t', true);
    await commit('a', 'failing check', (tx) => tx.create(p('/t/never'), buf(''), OPEN, PERSISTENT).check(p('/t'), 7).remove(p('/t'), -1));
    await getChildren('a', '/t', false);
    await commit('a', 'remove+create', (tx) => tx.remove(p('/t/seq-0000000000'), -1).create(p('/t/seq-'), null, OPEN, EPHEMERAL_SEQUENTIAL));
    await commit('a', 'bad version', (tx) => tx.setData(p('/t'), buf('x'), 9));
    show('c', await open('c'));
    await create('c', '/c-eph', buf('c'), OPEN, EPHEMERAL);
    await getData('b', '/c-eph', true);
    await exists('a', '/c-eph', true);
    await getChildren('c', '/', false);
    await close('c');
    await exists('b', '/c-eph', false);
    await getChildren('a', '/p', false);
    await close('a');
    await getChildren('b', '/t', false);
    await getChildren('b', '/', false);
    await close('b');
}

scenario().then(() => process.exit(0), (error) => {
    console.log(`scenario failed: ${error && error.stack || error}`);
    process.exit(1);
});
