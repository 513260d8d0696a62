-- redis.lua: the state machine of PROTOCOL.md inside Redis, for src/store/redis.c.
--
-- Every store call is one run of this script (EVALSHA): one atomic step,
-- whatever the number of front ends. It mirrors src/core/core.c rule by rule;
-- the same call sequence gives the same answers (tests/unit/test_model.c).
--
-- ARGV: op, now (milliseconds; empty: Redis's TIME), reservation_ms,
-- read_lease_ms, evict (1/0), write_lease_ms, release_grace_ms, use-log bound
-- (bytes), cluster (1/0), then the op's own arguments (see the op functions
-- at the end). KEYS: the :m key of the op's pool (so that a Redis Cluster
-- routes and checks the run) and its :guard key (never written: while the
-- pool's slot migrates, a run that names a missing key is refused with
-- TRYAGAIN, so no run sees the pool half moved), or none for the ops over
-- every pool.
--
-- Over a Redis Cluster (cluster 1) a run touches the keys of one pool only
-- (one hash tag, one slot): init leaves the registry to the caller,
-- allocate and delete return the keys that left the pool instead of
-- demoting them in the other ranks (the caller runs demote there), and the
-- ops over many pools (complete, stats, check, clear_all) are run by the
-- caller pool by pool (use, pool_stats, pool_check, drop).
-- Namespaces arrive hex-encoded (nsx), so any bytes are safe in key names.
-- Keys arrive as index fields: "\0" + 32 packed bytes for a 64-hex key,
-- "\1" + the raw bytes for any other key.
--
-- Keys of a pool (one hash tag per pool: {nsx:rank}, one cluster slot):
--   hfm:{nsx:rank}:m    hash: n (num_pages), t (pages ever handed out: the
--                       high-water mark), h / l (LRU head / tail page), own,
--                       res, dr (pages OWNED / RESERVED / DRAINING), and the
--                       counters
--   hfm:{nsx:rank}:k    hash: index field -> page, OWNED pages only
--   hfm:{nsx:rank}:r<c> string: 64-byte page records of pages c*2^20 ..
--   hfm:{nsx:rank}:f    list: FREE pages below the mark (LIFO)
--   hfm:{nsx:rank}:e    zset: reservation batches by deadline (below)
--   hfm:{nsx:rank}:bn   hash: batch -> how many of its pages are RESERVED
--   hfm:{nsx:rank}:bp   hash: batch -> its pages ("p1,p2,...")
--   hfm:{nsx:rank}:d    zset: DRAINING pages by drain end
--   hfm:{nsx:rank}:w    zset: OWNED pages with a write lease, by its end
--   hfm:{nsx:rank}:x    hash: page -> raw key, for keys that do not fit 32 bytes
--   hfm:{nsx:rank}:u    string: the use log (reads' uses, not yet applied)
-- and hfm:ns:{nsx} (hash rank -> num_pages: the pools of a namespace) and
-- hfm:nss (set of the namespaces that have pools).
--
-- A page record (big-endian): state u8 | kind u8 | spare u16 | prev u32 |
-- next u32 | writers u32 | deadline i64 | write lease end i64 | key 32 bytes.
-- kind: 0 none, 1..32 raw key of that length inline, 33 packed 64-hex key,
-- 34 longer key (in :x). prev/next link the LRU of OWNED pages (NIL ends).
-- deadline: reservation deadline, lease end (read and write leases) or drain
-- end, as in core.c. writers / write lease end: the write lease of an OWNED
-- page (core.c's per-pool lease table), also listed in :w for expiry; a
-- RESERVED page keeps its reservation batch in the write lease end.
--
-- Reservation batches. The pages one allocation reserves in a pool share
-- one deadline, so they expire as one batch (numbered by the pool's counter
-- bq): one member of :e, one field of :bn and :bp, written once, instead of
-- a sorted-set member added and removed per page. A page leaving RESERVED
-- (confirmed, released, freed) counts its batch down; a batch at zero is
-- dropped; a batch whose deadline passes frees the pages still RESERVED in
-- it (those whose record names the batch). Pages at or above the mark have no record (all zeros,
-- which reads as FREE): creating a pool of 10^9 pages writes one hash.
--
-- The use log. A read (exists, lookup, batch_exists, get_locations) must
-- lease and "use" what it found; moving LRU links costs Redis more per key
-- than the read itself. So a read appends one record per pool to :u
-- ("lease_end:misses:p1,p2,...;", pages in use order), and every script that
-- changes a pool applies that pool's log first (apply_log: latest use per
-- page wins, leases take the maximum), as does a read that finds the log
-- past the bound. Nothing reads leases or LRU order without applying first,
-- and nothing changes a page between a read and the next apply (a change
-- applies first), so the pages in the log are still owned by the keys that
-- were read: the order stays exact.

local NIL = 4294967295
local CHUNK = 1048576
local RS = 64

local op = ARGV[1]
local now = tonumber(ARGV[2])
if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local RES_MS = tonumber(ARGV[3])
local LEASE_MS = tonumber(ARGV[4])
local EVICT = ARGV[5] == '1'
local WLEASE_MS = tonumber(ARGV[6])
local GRACE_MS = tonumber(ARGV[7])
local LOG_BOUND = tonumber(ARGV[8])
-- 1: the pools are spread over a Redis Cluster: a run touches one pool (one
-- slot) only, and what crosses pools (the namespace registry, demotions in
-- the other ranks) is left to redis.c, which runs it per slot
local CLUSTER = ARGV[9] == '1'
local A = 10 -- first argument of the op

local function fmt(x)
    return string.format('%d', x)
end

-- HMGET of list[from..#list] (Lua's unpack takes a few thousand at most).
local function hmget(key, list, from)
    local n = #list
    if from > n then
        return {}
    end
    if n - from + 1 <= 4000 then
        return redis.call('HMGET', key, unpack(list, from))
    end
    local out = {}
    for s = from, n, 4000 do
        local v = redis.call('HMGET', key, unpack(list, s, math.min(s + 3999, n)))
        for i = 1, #v do
            out[#out + 1] = v[i]
        end
    end
    return out
end

-- ------------------------------------------------------------ pools

local POOLS = {}
local ORDER = {}

local function pfx_of(nsx, rank)
    return 'hfm:{' .. nsx .. ':' .. rank .. '}:'
end

-- A pool written before reservation batches (no bq in its hash) had one
-- member of :e per RESERVED page: its pages become one batch per deadline,
-- once. Returns the batch counter.
local function batch_old_reservations(pfx)
    local e = redis.call('ZRANGE', pfx .. 'e', 0, -1, 'WITHSCORES')
    redis.call('DEL', pfx .. 'e')
    local by_dl, order, bq = {}, {}, 0
    for j = 1, #e, 2 do
        local dl = e[j + 1]
        if not by_dl[dl] then
            bq = bq + 1
            by_dl[dl] = {id = bq, pages = {}}
            order[#order + 1] = dl
        end
        local page = tonumber(e[j])
        local pages = by_dl[dl].pages
        pages[#pages + 1] = page
        redis.call('SETRANGE', pfx .. 'r' .. math.floor(page / CHUNK),
                   (page % CHUNK) * 64 + 24, struct.pack('>i8', by_dl[dl].id))
    end
    for _, dl in ipairs(order) do
        local b = by_dl[dl]
        redis.call('ZADD', pfx .. 'e', dl, b.id)
        redis.call('HSET', pfx .. 'bn', b.id, #b.pages)
        redis.call('HSET', pfx .. 'bp', b.id, table.concat(b.pages, ','))
    end
    redis.call('HSET', pfx .. 'm', 'bq', bq)
    return bq
end

local function pool_get(nsx, rank)
    local id = nsx .. ':' .. rank
    local P = POOLS[id]
    if P ~= nil then
        return P or nil
    end
    local pfx = pfx_of(nsx, rank)
    local m = redis.call('HMGET', pfx .. 'm', 'n', 't', 'h', 'l', 'own', 'res', 'dr', 'bq')
    if not m[1] then
        POOLS[id] = false
        return nil
    end
    if not m[8] then
        m[8] = batch_old_reservations(pfx)
    end
    P = {pfx = pfx, nsx = nsx, rank = tonumber(rank), n = tonumber(m[1]), t = tonumber(m[2]),
         head = tonumber(m[3]), tail = tonumber(m[4]), own = tonumber(m[5]),
         res = tonumber(m[6]), dr = tonumber(m[7]), bq = tonumber(m[8]),
         bleft = {}, bgone = {},
         cnt = {}, rc = {}, rd = {}, idx = {}, zd = {}, zw = {}, fpush = {}, xo = {},
         applied = false}
    POOLS[id] = P
    ORDER[#ORDER + 1] = P
    return P
end

local function count(P, name, by)
    P.cnt[name] = (P.cnt[name] or 0) + (by or 1)
end

local NSRANKS = {}
local function ns_ranks(nsx)
    local r = NSRANKS[nsx]
    if not r then
        r = redis.call('HKEYS', 'hfm:ns:{' .. nsx .. '}')
        NSRANKS[nsx] = r
    end
    return r
end

-- --------------------------------------------------------- records

local FIELDS = {st = {0, 'u8'}, kind = {8, 'u8'}, w = {96, 'u32'}, prev = {32, 'u32'},
                next = {64, 'u32'}, dl = {128, 'i64'}, wdl = {192, 'i64'}}
local ZERO32 = string.rep('\0', 32)

local function ckey(P, page)
    return P.pfx .. 'r' .. math.floor(page / CHUNK)
end

-- The record at position pos of the string s (shorter: zeros) as a cache
-- entry; fields of c written in this run win (c nil: a fresh entry).
local REC = '>BBHI4I4I4i8i8c32' -- a record: state kind spare prev next writers deadline wdl key
local ZERO_REC = string.rep('\0', 64)
local function parse_at(c, s, pos)
    if #s < pos + RS - 1 then
        s = string.sub(s, pos) .. string.sub(ZERO_REC, 1, RS - (#s - pos + 1))
        pos = 1
    end
    local st, kind, _, prev, nxt, w, dl, wdl, key = struct.unpack(REC, s, pos)
    if c == nil then
        return {st = st, kind = kind, w = w, prev = prev, next = nxt, dl = dl, wdl = wdl, key = key,
                full = true}
    end
    if c.st == nil then c.st = st end
    if c.kind == nil then c.kind = kind end
    if c.w == nil then c.w = w end
    if c.prev == nil then c.prev = prev end
    if c.next == nil then c.next = nxt end
    if c.dl == nil then c.dl = dl end
    if c.wdl == nil then c.wdl = wdl end
    if c.key == nil then c.key = key end
    c.full = true
    return c
end

-- The whole record into the cache.
local function load(P, page)
    local c = P.rc[page]
    if c and c.full then
        return c
    end
    local off = (page % CHUNK) * RS
    c = parse_at(c, redis.call('GETRANGE', ckey(P, page), off, off + RS - 1), 1)
    P.rc[page] = c
    return c
end

-- Many records into the cache: pages close to each other (a fresh
-- allocation's are consecutive) come in one GETRANGE of their span.
local function load_many(P, pages)
    local by_chunk = {}
    for i = 1, #pages do
        local p = pages[i]
        local c = P.rc[p]
        if not (c and c.full) then
            local k = math.floor(p / CHUNK)
            local l = by_chunk[k]
            if not l then
                l = {}
                by_chunk[k] = l
            end
            l[#l + 1] = p
        end
    end
    for k, list in pairs(by_chunk) do
        table.sort(list)
        local key = P.pfx .. 'r' .. k
        local i, n = 1, #list
        while i <= n do
            local j = i
            while j < n and list[j + 1] - list[j] <= 4 do
                j = j + 1
            end
            local first = list[i] % CHUNK
            local span = redis.call('GETRANGE', key, first * RS, (list[j] % CHUNK) * RS + RS - 1)
            for q = i, j do
                local p = list[q]
                local c = P.rc[p]
                if not (c and c.full) then
                    P.rc[p] = parse_at(c, span, ((p % CHUNK) - first) * RS + 1)
                end
            end
            i = j + 1
        end
    end
end

local function get(P, page, f)
    local c = P.rc[page]
    if c then
        local v = c[f]
        if v ~= nil then
            return v
        end
    end
    return load(P, page)[f]
end

-- P.rd[page]: the fields written in this run, or WHOLE: the record is
-- known whole (c.full) and will be written whole.
local WHOLE = {}

local function set(P, page, f, v)
    local c = P.rc[page]
    if not c then
        c = {}
        P.rc[page] = c
    end
    c[f] = v
    local d = P.rd[page]
    if d == WHOLE then
        return
    end
    if c.full then
        P.rd[page] = WHOLE
        return
    end
    if not d then
        d = {}
        P.rd[page] = d
    end
    d[f] = true
end

-- The index field of the key a record holds.
local function rec_field(P, page)
    local c = load(P, page)
    local kind = c.kind
    if kind == 33 then
        return '\0' .. c.key
    elseif kind == 34 then
        local raw = P.xo[page]
        if raw == nil then
            raw = redis.call('HGET', P.pfx .. 'x', page)
            P.xo[page] = raw
        end
        return '\1' .. raw
    end
    return '\1' .. string.sub(c.key, 1, kind)
end

local function rec_setkey(P, page, field)
    if string.byte(field, 1) == 0 then
        set(P, page, 'kind', 33)
        set(P, page, 'key', string.sub(field, 2))
        return
    end
    local raw = string.sub(field, 2)
    if #raw <= 32 then
        set(P, page, 'kind', #raw)
        set(P, page, 'key', raw .. string.sub(ZERO32, 1, 32 - #raw))
    else
        set(P, page, 'kind', 34)
        set(P, page, 'key', ZERO32)
        P.xo[page] = raw
        P.xdirty = true
    end
end

local function rec_dropkey(P, page)
    if get(P, page, 'kind') == 34 then
        P.xo[page] = false
        P.xdirty = true
    end
    set(P, page, 'kind', 0)
    set(P, page, 'key', ZERO32)
end

-- ----------------------------------------------------------- index

local function idx_find(P, field)
    local v = P.idx[field]
    if v == nil then
        local r = redis.call('HGET', P.pfx .. 'k', field)
        v = r and tonumber(r) or false
        P.idx[field] = v
    end
    return v or nil
end

local function idx_set(P, field, page)
    P.idx[field] = page
    P.idirty = P.idirty or {}
    P.idirty[field] = true
end

-- -------------------------------------------------------------- LRU

local function lru_remove(P, page)
    local prev, nxt = get(P, page, 'prev'), get(P, page, 'next')
    if prev ~= NIL then set(P, prev, 'next', nxt) else P.head = nxt end
    if nxt ~= NIL then set(P, nxt, 'prev', prev) else P.tail = prev end
    set(P, page, 'prev', NIL)
    set(P, page, 'next', NIL)
end

local function lru_push_tail(P, page)
    local tail = P.tail
    set(P, page, 'prev', tail)
    set(P, page, 'next', NIL)
    if tail ~= NIL then set(P, tail, 'next', page) else P.head = page end
    P.tail = page
end

local function lru_push_head(P, page)
    local head = P.head
    set(P, page, 'prev', NIL)
    set(P, page, 'next', head)
    if head ~= NIL then set(P, head, 'prev', page) else P.tail = page end
    P.head = page
end

local function touch(P, page)
    if P.tail ~= page then
        lru_remove(P, page)
        lru_push_tail(P, page)
    end
end

-- ---------------------------------------------------------- use log

-- Apply the use log: the used pages move, in the order of their last use,
-- to the most recently used end, their leases extended. Done in bulk: the
-- runs of used pages are cut out of the list (two link writes a run), then
-- chained at the tail (two a page), so a page costs a few field writes.
local function apply_log(P)
    if P.applied then
        return
    end
    P.applied = true
    local s = redis.call('GET', P.pfx .. 'u')
    if not s then
        return
    end
    redis.call('DEL', P.pfx .. 'u')
    local pages, lease, misses, np = {}, {}, 0, 0
    for until_, miss, list in string.gmatch(s, '(%d+):(%d+):([%d,]*);') do
        local u = tonumber(until_)
        misses = misses + tonumber(miss)
        for p in string.gmatch(list, '%d+') do
            p = tonumber(p)
            np = np + 1
            pages[np] = p
            local l = lease[p]
            if not l or l < u then
                lease[p] = u
            end
        end
    end
    count(P, 'hits', np)
    count(P, 'misses', misses)
    if np == 0 then
        return
    end
    local last = {}
    for i = 1, np do
        last[pages[i]] = i
    end
    local order, used = {}, {}
    for i = 1, np do
        local p = pages[i]
        if last[p] == i then
            order[#order + 1] = p
            used[p] = true
        end
    end
    load_many(P, order)
    local rc = P.rc
    local function w(page, f, v)
        set(P, page, f, v)
    end
    -- cut each run of used pages out: its outer neighbours link to each other
    for i = 1, #order do
        local p = order[i]
        local a = rc[p].prev
        if a == NIL or not used[a] then
            local q = p
            while rc[q].next ~= NIL and used[rc[q].next] do
                q = rc[q].next
            end
            local b = rc[q].next
            if a ~= NIL then w(a, 'next', b) else P.head = b end
            if b ~= NIL then w(b, 'prev', a) else P.tail = a end
        end
    end
    -- chain them at the tail, in the order of their last use
    local t = P.tail
    if t ~= NIL then w(t, 'next', order[1]) else P.head = order[1] end
    for i = 1, #order do
        local p = order[i]
        w(p, 'prev', i == 1 and t or order[i - 1])
        w(p, 'next', order[i + 1] or NIL)
        if lease[p] > rc[p].dl then
            w(p, 'dl', lease[p])
        end
    end
    P.tail = order[#order]
end

-- Open a pool for a change: its uses applied first.
local function pool_change(nsx, rank)
    local P = pool_get(nsx, rank)
    if P then
        apply_log(P)
        P.changed = true
    end
    return P
end

-- Record the uses of a read; apply them at once past the bound.
local function log_uses(nsx, rank, misses, used)
    local pfx = pfx_of(nsx, rank)
    local len = redis.call('APPEND', pfx .. 'u',
        fmt(now + LEASE_MS) .. ':' .. misses .. ':' .. table.concat(used, ',') .. ';')
    if len > LOG_BOUND then
        pool_change(nsx, rank)
    end
end

-- ------------------------------------------------------ page states

local function free_count(P)
    return P.n - P.own - P.res - P.dr
end

-- ------------------------------------------------------ write leases

-- The page leaves OWNED: its write lease goes with it (the deadline keeps
-- the protection for draining).
local function wlease_drop(P, page)
    if get(P, page, 'w') ~= 0 then
        set(P, page, 'w', 0)
        set(P, page, 'wdl', 0)
        P.zw[page] = false
    end
end

-- One more writer of the OWNED page, protected until now + write lease.
local function page_write_lease(P, page)
    local e = now + WLEASE_MS
    local w = get(P, page, 'w')
    set(P, page, 'w', w + 1)
    if w == 0 or e > get(P, page, 'wdl') then
        set(P, page, 'wdl', e)
        P.zw[page] = e
    end
    if e > get(P, page, 'dl') then
        set(P, page, 'dl', e)
    end
    count(P, 'wleases')
end

-- A writer confirmed the page; the last one ends the lease: what is left is
-- at most a read lease from now.
local function page_write_done(P, page)
    local w = get(P, page, 'w')
    if w == 0 then
        return
    end
    set(P, page, 'w', w - 1)
    if w > 1 then
        return
    end
    set(P, page, 'wdl', 0)
    P.zw[page] = false
    local u = now + LEASE_MS
    if u < get(P, page, 'dl') then
        set(P, page, 'dl', u)
    end
    count(P, 'wended')
end

local function page_free(P, page)
    rec_dropkey(P, page)
    set(P, page, 'st', 0)
    set(P, page, 'dl', 0)
    wlease_drop(P, page)
    P.fpush[#P.fpush + 1] = page
end

local function take_free(P)
    local n = #P.fpush
    if n > 0 then
        local p = P.fpush[n]
        P.fpush[n] = nil
        return p
    end
    if not P.fempty then
        local v = redis.call('LPOP', P.pfx .. 'f')
        if v then
            return tonumber(v)
        end
        P.fempty = true -- pages freed later in this run go to fpush
    end
    if P.t < P.n then
        P.t = P.t + 1
        return P.t - 1
    end
    return nil
end

-- A reservation writes every field of the record: it need not be read.
-- (A page comes FREE from the free list or the mark, or evicted: its key
-- was dropped already.)
local function reserve(P, page, field, deadline)
    local b = P.bnew
    if not b then
        P.bq = P.bq + 1
        b = {id = P.bq, dl = deadline, pages = {}}
        P.bnew = b
    end
    b.pages[#b.pages + 1] = page
    P.rc[page] = {st = 1, kind = 0, w = 0, prev = NIL, next = NIL, dl = deadline, wdl = b.id,
                  key = ZERO32, full = true}
    P.rd[page] = WHOLE
    rec_setkey(P, page, field)
    P.res = P.res + 1
    count(P, 'reservations')
end

-- The page leaves RESERVED: its batch counts it down.
local function res_leave(P, page)
    local b = get(P, page, 'wdl')
    P.bleft[b] = (P.bleft[b] or 0) + 1
    set(P, page, 'wdl', 0)
    P.res = P.res - 1
end

local function unreserve(P, page)
    res_leave(P, page)
    page_free(P, page)
end

-- A release drains for the release grace, so that the same release resent by
-- a client that missed the answer finds it DRAINING, never a page reserved
-- meanwhile for another writer.
local function page_release(P, page)
    if GRACE_MS <= 0 then
        unreserve(P, page)
        return
    end
    res_leave(P, page)
    rec_dropkey(P, page)
    set(P, page, 'st', 3)
    set(P, page, 'dl', now + GRACE_MS)
    P.zd[page] = now + GRACE_MS
    P.dr = P.dr + 1
end

local function own(P, page, field)
    res_leave(P, page)
    set(P, page, 'st', 2)
    set(P, page, 'dl', 0)
    idx_set(P, field, page)
    lru_push_tail(P, page)
    P.own = P.own + 1
    count(P, 'confirmations')
end

-- An OWNED page loses its key: FREE now, or DRAINING while leased.
local function disown(P, page, field)
    idx_set(P, field, false)
    lru_remove(P, page)
    wlease_drop(P, page)
    P.own = P.own - 1
    local dl = get(P, page, 'dl')
    if dl > now then
        rec_dropkey(P, page)
        set(P, page, 'st', 3)
        P.zd[page] = dl
        P.dr = P.dr + 1
    else
        page_free(P, page)
    end
end

local function expire(P)
    local e = redis.call('ZRANGEBYSCORE', P.pfx .. 'e', '-inf', now)
    if #e > 0 then
        redis.call('ZREMRANGEBYSCORE', P.pfx .. 'e', '-inf', now)
        local lists = hmget(P.pfx .. 'bp', e, 1)
        redis.call('HDEL', P.pfx .. 'bn', unpack(e))
        redis.call('HDEL', P.pfx .. 'bp', unpack(e))
        local expired = 0
        for i = 1, #e do
            local b = tonumber(e[i])
            P.bgone[b] = true
            local pages = {}
            for q in string.gmatch(lists[i] or '', '%d+') do
                pages[#pages + 1] = tonumber(q)
            end
            load_many(P, pages)
            for j = 1, #pages do
                local q = pages[j]
                if get(P, q, 'st') == 1 and get(P, q, 'wdl') == b then
                    unreserve(P, q)
                    expired = expired + 1
                end
            end
        end
        count(P, 'expired', expired)
    end
    local d = redis.call('ZRANGEBYSCORE', P.pfx .. 'd', '-inf', now)
    if #d > 0 then
        redis.call('ZREMRANGEBYSCORE', P.pfx .. 'd', '-inf', now)
        for i = 1, #d do
            P.dr = P.dr - 1
            page_free(P, tonumber(d[i]))
        end
    end
    -- write leases whose end passed (their writers never confirmed)
    local w = redis.call('ZRANGEBYSCORE', P.pfx .. 'w', '-inf', now)
    if #w > 0 then
        redis.call('ZREMRANGEBYSCORE', P.pfx .. 'w', '-inf', now)
        for i = 1, #w do
            local p = tonumber(w[i])
            set(P, p, 'w', 0)
            set(P, p, 'wdl', 0)
        end
        count(P, 'wexpired', #w)
    end
end

-- When a key leaves one rank, its pages on the other ranks go to the
-- eviction end (unless leased).
local LEFT = {} -- over a cluster: the keys that left their pool, in order
local function demote_in_other_ranks(P, field)
    if CLUSTER then
        LEFT[#LEFT + 1] = field
        return
    end
    local ranks = ns_ranks(P.nsx)
    if #ranks < 2 then
        return
    end
    for i = 1, #ranks do
        if tonumber(ranks[i]) ~= P.rank then
            local Q = pool_change(P.nsx, ranks[i])
            if Q then
                local q = idx_find(Q, field)
                if q and get(Q, q, 'dl') <= now then
                    lru_remove(Q, q)
                    lru_push_head(Q, q)
                end
            end
        end
    end
end

-- ------------------------------------------------------------ flush

local function flush_pool(P)
    -- records: a record known whole is written whole (runs of consecutive
    -- ones in one SETRANGE); a record of which only some fields are known
    -- (an LRU neighbour) gets those fields (BITFIELD SET, one per chunk)
    local ops_by_chunk, whole_by_chunk = {}, {}
    for page, d in pairs(P.rd) do
        local c = P.rc[page]
        local k = math.floor(page / CHUNK)
        if c.full then
            local l = whole_by_chunk[k]
            if not l then
                l = {}
                whole_by_chunk[k] = l
            end
            l[#l + 1] = page
        else
            local ops = ops_by_chunk[k]
            if not ops then
                ops = {}
                ops_by_chunk[k] = ops
            end
            local b = (page % CHUNK) * 512
            for f in pairs(d) do
                local spec = FIELDS[f]
                local n = #ops
                ops[n + 1] = 'SET'
                ops[n + 2] = spec[2]
                ops[n + 3] = b + spec[1]
                ops[n + 4] = c[f]
            end
        end
    end
    for k, list in pairs(whole_by_chunk) do
        table.sort(list)
        local key = P.pfx .. 'r' .. k
        local i, n = 1, #list
        while i <= n do
            local j = i
            while j < n and list[j + 1] == list[j] + 1 do
                j = j + 1
            end
            local parts = {}
            for q = i, j do
                local c = P.rc[list[q]]
                parts[#parts + 1] = struct.pack(REC, c.st, c.kind, 0, c.prev, c.next,
                                                c.w, c.dl, c.wdl, c.key)
            end
            redis.call('SETRANGE', key, (list[i] % CHUNK) * RS, table.concat(parts))
            i = j + 1
        end
    end
    for k, ops in pairs(ops_by_chunk) do
        for s = 1, #ops, 4000 do
            redis.call('BITFIELD', P.pfx .. 'r' .. k, unpack(ops, s, math.min(s + 3999, #ops)))
        end
    end
    -- index
    if P.idirty then
        local sets, dels = {}, {}
        for field in pairs(P.idirty) do
            local v = P.idx[field]
            if v then
                sets[#sets + 1] = field
                sets[#sets + 1] = v
            else
                dels[#dels + 1] = field
            end
        end
        for s = 1, #sets, 4000 do
            redis.call('HSET', P.pfx .. 'k', unpack(sets, s, math.min(s + 3999, #sets)))
        end
        for s = 1, #dels, 4000 do
            redis.call('HDEL', P.pfx .. 'k', unpack(dels, s, math.min(s + 3999, #dels)))
        end
    end
    -- long keys
    if P.xdirty then
        for page, raw in pairs(P.xo) do
            if raw then
                redis.call('HSET', P.pfx .. 'x', page, raw)
            else
                redis.call('HDEL', P.pfx .. 'x', page)
            end
        end
    end
    -- reservations and drains by deadline
    -- reservation batches: the new one, then the counts of those that lost pages
    local b = P.bnew
    if b then
        local left = #b.pages - (P.bleft[b.id] or 0)
        if left > 0 then
            redis.call('ZADD', P.pfx .. 'e', fmt(b.dl), b.id)
            redis.call('HSET', P.pfx .. 'bn', b.id, left)
            redis.call('HSET', P.pfx .. 'bp', b.id, table.concat(b.pages, ','))
        end
    end
    for id, n in pairs(P.bleft) do
        if not P.bgone[id] and not (b and id == b.id) then
            if redis.call('HINCRBY', P.pfx .. 'bn', id, -n) <= 0 then
                redis.call('HDEL', P.pfx .. 'bn', id)
                redis.call('HDEL', P.pfx .. 'bp', id)
                redis.call('ZREM', P.pfx .. 'e', id)
            end
        end
    end
    for _, z in ipairs({{P.zd, 'd'}, {P.zw, 'w'}}) do
        local adds, rems = {}, {}
        local last, text = nil, nil -- an allocation's pages share one deadline
        for page, score in pairs(z[1]) do
            if score then
                if score ~= last then
                    last, text = score, fmt(score)
                end
                adds[#adds + 1] = text
                adds[#adds + 1] = page
            else
                rems[#rems + 1] = page
            end
        end
        for s = 1, #rems, 4000 do
            redis.call('ZREM', P.pfx .. z[2], unpack(rems, s, math.min(s + 3999, #rems)))
        end
        for s = 1, #adds, 4000 do
            redis.call('ZADD', P.pfx .. z[2], unpack(adds, s, math.min(s + 3999, #adds)))
        end
    end
    -- free pages
    for s = 1, #P.fpush, 4000 do
        redis.call('LPUSH', P.pfx .. 'f', unpack(P.fpush, s, math.min(s + 3999, #P.fpush)))
    end
    -- meta and counters
    redis.call('HSET', P.pfx .. 'm', 'bq', P.bq, 't', P.t, 'h', P.head, 'l', P.tail, 'own', P.own,
               'res', P.res, 'dr', P.dr)
    for name, by in pairs(P.cnt) do
        if by ~= 0 then
            redis.call('HINCRBY', P.pfx .. 'm', name, by)
        end
    end
end

local function flush_all()
    for i = 1, #ORDER do
        local P = ORDER[i]
        if P.changed then
            flush_pool(P)
        end
    end
end

-- ------------------------------------------------------- allocation

local function find_evictable(P, scan)
    if not EVICT then
        return nil
    end
    if not scan.started then
        scan.cursor = P.head
        scan.seen = 0
        scan.started = true
    end
    local candidates = P.own - scan.prot
    while scan.cursor ~= NIL and scan.seen < candidates do
        local p = scan.cursor
        scan.cursor = get(P, p, 'next')
        if get(P, p, 'dl') <= now then
            return p
        end
        scan.seen = scan.seen + 1
    end
    return nil
end

local function take_page(P, scan)
    local p = take_free(P)
    if p then
        return p
    end
    p = find_evictable(P, scan)
    if not p then
        return nil
    end
    local field = rec_field(P, p)
    idx_set(P, field, false)
    lru_remove(P, p)
    wlease_drop(P, p) -- an ended lease not swept yet; a live one is never evicted
    P.own = P.own - 1
    demote_in_other_ranks(P, field)
    rec_dropkey(P, p)
    count(P, 'evictions')
    return p
end

local function can_take(P, need, prot)
    local avail = free_count(P)
    if avail >= need then
        return true
    end
    if not EVICT then
        return false
    end
    local candidates, seen, p = P.own - prot, 0, P.head
    while p ~= NIL and seen < candidates and avail < need do
        if get(P, p, 'dl') <= now then
            avail = avail + 1
        end
        p = get(P, p, 'next')
        seen = seen + 1
    end
    return avail >= need
end

-- ---------------------------------------------------------- the ops

-- init nsx rank num_pages: {0, created, num_pages}. Over a cluster the
-- caller then registers the pool (HSET hfm:ns:{nsx}, SADD hfm:nss), also
-- when it existed already (so a registration lost to a crash is redone).
local function op_init()
    local nsx, rank, n = ARGV[A], ARGV[A + 1], ARGV[A + 2]
    local pfx = pfx_of(nsx, rank)
    local old = redis.call('HGET', pfx .. 'm', 'n')
    if old then
        return {0, 0, tonumber(old)}
    end
    redis.call('HSET', pfx .. 'm', 'n', n, 't', 0, 'h', NIL, 'l', NIL, 'own', 0, 'res', 0,
               'dr', 0, 'wl', 0, 'bq', 0)
    if not CLUSTER then
        redis.call('HSET', 'hfm:ns:{' .. nsx .. '}', rank, n)
        redis.call('SADD', 'hfm:nss', nsx)
    end
    return {0, 1, tonumber(n)}
end

-- The pool of the op's nsx rank (ARGV[A], ARGV[A + 1]) for a change, its
-- expiries applied; nil if there is no such pool.
local function arg_pool()
    local P = pool_change(ARGV[A], ARGV[A + 1])
    if P then
        expire(P)
    end
    return P
end

-- allocate nsx rank mode(0 partial, 1 all or nothing) field...
local function op_allocate()
    local P = arg_pool()
    if not P then
        return {1}
    end
    local whole = ARGV[A + 2] == '1'
    local n = #ARGV - A - 2
    local fields, dup, first, uniq = {}, {}, {}, {}
    for i = 1, n do
        local f = ARGV[A + 2 + i]
        fields[i] = f
        if first[f] then
            dup[i] = first[f]
        else
            first[f] = i
            uniq[#uniq + 1] = f
        end
    end
    local pages, existed = {}, {}
    if n == 0 then
        return {0, pages, existed}
    end
    local v = hmget(P.pfx .. 'k', uniq, 1)
    local hitpages, j = {}, 0
    for i = 1, n do
        if not dup[i] then
            j = j + 1
            if v[j] then
                pages[i] = tonumber(v[j])
                hitpages[#hitpages + 1] = pages[i]
                P.idx[fields[i]] = pages[i]
            else
                pages[i] = -1
                P.idx[fields[i]] = false
            end
        end
    end
    load_many(P, hitpages)
    local hits, need = 0, 0
    for i = 1, n do
        if not dup[i] then
            if pages[i] >= 0 then
                touch(P, pages[i])
                hits = hits + 1
            else
                need = need + 1
            end
        end
    end
    count(P, 'hits', hits)
    count(P, 'misses', need)
    local give = not whole or can_take(P, need, hits)
    -- write protection: vLLM rewrites every hit of an allocation that got
    -- all its new pages before it confirms them
    local lease_hits = whole and give and hits > 0 and WLEASE_MS > 0
    local scan = {cursor = NIL, seen = 0, prot = hits, started = false}
    local deadline = now + RES_MS
    for i = 1, n do
        if dup[i] then
            pages[i] = pages[dup[i]]
            existed[i] = existed[dup[i]]
        else
            local hit = pages[i] >= 0
            existed[i] = hit and 1 or 0
            if hit and lease_hits then
                page_write_lease(P, pages[i])
            end
            if not hit and give then
                local p = take_page(P, scan)
                if p then
                    reserve(P, p, fields[i], deadline)
                    pages[i] = p
                end
            end
        end
    end
    flush_all()
    return {0, pages, existed, LEFT}
end

local R_RANGE, R_NOTRES, R_OTHER, R_OWNED = 0, 1, 2, 3

-- confirm nsx rank nconf field page ... release...
local function op_confirm()
    local P = arg_pool()
    if not P then
        return {1}
    end
    local n = tonumber(ARGV[A + 2])
    local refused = 0
    -- the keys' pages and the records named, each in one call
    local fields, named = {}, {}
    for i = 0, n - 1 do
        local f = ARGV[A + 3 + 2 * i]
        if P.idx[f] == nil then
            fields[#fields + 1] = f
        end
        local page = tonumber(ARGV[A + 4 + 2 * i])
        if page >= 0 and page < P.t then
            named[#named + 1] = page
        end
    end
    for i = A + 3 + 2 * n, #ARGV do
        local page = tonumber(ARGV[i])
        if page >= 0 and page < P.t then
            named[#named + 1] = page
        end
    end
    if #fields > 0 then
        local v = hmget(P.pfx .. 'k', fields, 1)
        for i = 1, #fields do
            if P.idx[fields[i]] == nil then
                P.idx[fields[i]] = v[i] and tonumber(v[i]) or false
            end
        end
    end
    load_many(P, named)
    local function refuse(kind, why)
        count(P, kind .. why)
        refused = refused + 1
    end
    for i = 0, n - 1 do
        local field = ARGV[A + 3 + 2 * i]
        local page = tonumber(ARGV[A + 4 + 2 * i])
        if page < 0 or page >= P.n then
            refuse('rc', R_RANGE)
        elseif page >= P.t then
            refuse('rc', R_NOTRES)
        else
            local st = get(P, page, 'st')
            if st ~= 1 and st ~= 2 then
                refuse('rc', R_NOTRES)
            elseif rec_field(P, page) ~= field then
                refuse('rc', R_OTHER)
            elseif st == 2 then
                page_write_done(P, page)
                touch(P, page)
            else
                local owned = idx_find(P, field)
                if owned then
                    unreserve(P, page)
                    touch(P, owned)
                    count(P, 'dups')
                else
                    own(P, page, field)
                end
            end
        end
    end
    for i = A + 3 + 2 * n, #ARGV do
        local page = tonumber(ARGV[i])
        if page < 0 or page >= P.n then
            refuse('rr', R_RANGE)
        else
            local st = page < P.t and get(P, page, 'st') or 0
            if st == 1 then
                page_release(P, page)
                count(P, 'releases')
            else
                refuse('rr', st == 2 and R_OWNED or R_NOTRES)
            end
        end
    end
    flush_all()
    return {0, refused}
end

-- exists / lookup: nsx rank field...: the pages (nil: absent)
local function op_read()
    local nsx, rank = ARGV[A], ARGV[A + 1]
    local pfx = pfx_of(nsx, rank)
    if redis.call('EXISTS', pfx .. 'm') == 0 then
        return {1}
    end
    local v = hmget(pfx .. 'k', ARGV, A + 2)
    local used, misses = {}, 0
    for i = 1, #v do
        if v[i] then
            used[#used + 1] = v[i]
        else
            misses = misses + 1
        end
    end
    log_uses(nsx, rank, misses, used)
    flush_all()
    return {0, v}
end

-- complete nsx rank(-1: exists) field...: completeness over every pool of nsx
local function op_complete()
    local nsx, rank = ARGV[A], ARGV[A + 1]
    local ranks = ns_ranks(nsx)
    local n = #ARGV - A - 1
    local answer = {}
    local target = nil
    if rank ~= '-1' then
        for i = 1, #ranks do
            if ranks[i] == rank then
                target = i
            end
        end
        if not target then
            return {1}
        end
    end
    if #ranks == 0 or n == 0 then
        for i = 1, n do
            answer[i] = false
        end
        return {0, answer}
    end
    local vals = {}
    for r = 1, #ranks do
        vals[r] = hmget(pfx_of(nsx, ranks[r]) .. 'k', ARGV, A + 2)
    end
    local complete, ncomplete = {}, 0
    for i = 1, n do
        local ok = true
        for r = 1, #ranks do
            if not vals[r][i] then
                ok = false
                break
            end
        end
        complete[i] = ok
        if ok then
            ncomplete = ncomplete + 1
        end
    end
    for r = 1, #ranks do
        local used, v = {}, vals[r]
        for i = 1, n do
            if complete[i] then
                used[#used + 1] = v[i]
            end
        end
        log_uses(nsx, ranks[r], n - ncomplete, used)
    end
    for i = 1, n do
        if not complete[i] then
            answer[i] = false
        elseif target then
            answer[i] = vals[target][i]
        else
            answer[i] = 1
        end
    end
    flush_all()
    return {0, answer}
end

-- delete nsx rank field...
local function op_delete()
    local P = arg_pool()
    if not P then
        return {1}
    end
    for i = A + 2, #ARGV do
        local field = ARGV[i]
        local p = idx_find(P, field)
        if p then
            disown(P, p, field)
            demote_in_other_ranks(P, field)
        end
    end
    flush_all()
    return {0, LEFT}
end

-- clear_pool nsx rank
local function op_clear_pool()
    local P = arg_pool()
    if not P then
        return {1}
    end
    while P.head ~= NIL do
        local p = P.head
        disown(P, p, rec_field(P, p))
    end
    local bp = redis.call('HGETALL', P.pfx .. 'bp')
    for i = 1, #bp, 2 do
        local b = tonumber(bp[i])
        for q in string.gmatch(bp[i + 1], '%d+') do
            q = tonumber(q)
            if get(P, q, 'st') == 1 and get(P, q, 'wdl') == b then
                unreserve(P, q)
            end
        end
    end
    flush_all()
    return {0}
end

local function pool_keys(nsx, rank)
    local pfx = pfx_of(nsx, rank)
    local keys = {pfx .. 'm', pfx .. 'k', pfx .. 'f', pfx .. 'e', pfx .. 'bn', pfx .. 'bp', pfx .. 'd',
                  pfx .. 'w', pfx .. 'x',
                  pfx .. 'u'}
    local t = tonumber(redis.call('HGET', pfx .. 'm', 't') or '0')
    for c = 0, math.floor((t + CHUNK - 1) / CHUNK) do
        keys[#keys + 1] = pfx .. 'r' .. c
    end
    return keys
end

local function op_clear_all()
    local nss = redis.call('SMEMBERS', 'hfm:nss')
    for i = 1, #nss do
        local ranks = redis.call('HKEYS', 'hfm:ns:{' .. nss[i] .. '}')
        for r = 1, #ranks do
            redis.call('UNLINK', unpack(pool_keys(nss[i], ranks[r])))
        end
        redis.call('UNLINK', 'hfm:ns:{' .. nss[i] .. '}')
    end
    redis.call('UNLINK', 'hfm:nss')
    return {0}
end

local COUNTERS = {'hits', 'misses', 'reservations', 'confirmations', 'releases', 'evictions',
                  'expired', 'dups', 'rc0', 'rc1', 'rc2', 'rc3', 'rr0', 'rr1', 'rr2', 'rr3',
                  'wleases', 'wended', 'wexpired'}

-- The stats row of a pool {nsx, rank, n, t, own, res, dr, write leased,
-- counters...}, uses applied and leases expired first; nil: no pool.
local function stats_row(nsx, rank)
    local P = pool_change(nsx, rank)
    if not P then
        return nil
    end
    expire(P)
    local m = redis.call('HMGET', P.pfx .. 'm', unpack(COUNTERS))
    local wl = redis.call('ZCARD', P.pfx .. 'w')
    for _, e in pairs(P.zw) do
        wl = wl + (e and 1 or 0) -- not flushed yet: none, after expire()
    end
    local row = {nsx, P.rank, P.n, P.t, P.own, P.res, P.dr, wl}
    for c = 1, #COUNTERS do
        row[#row + 1] = tonumber(m[c] or '0') + (P.cnt[COUNTERS[c]] or 0)
    end
    return row
end

-- stats: every pool's row, by namespace then rank
local function op_stats()
    local out = {}
    local nss = redis.call('SMEMBERS', 'hfm:nss')
    table.sort(nss)
    for i = 1, #nss do
        local ranks = ns_ranks(nss[i])
        local nums = {}
        for r = 1, #ranks do
            nums[r] = tonumber(ranks[r])
        end
        table.sort(nums)
        for r = 1, #nums do
            local row = stats_row(nss[i], nums[r])
            if row then
                out[#out + 1] = row
            end
        end
    end
    flush_all()
    return {0, out}
end

-- pool_stats nsx rank (over a cluster): {0, row} or {0} (no pool)
local function op_pool_stats()
    local row = stats_row(ARGV[A], ARGV[A + 1])
    flush_all()
    return row and {0, row} or {0}
end

-- pages nsx rank: {state, field, deadline} of every page (tests), after expiry
local function op_pages()
    local P = arg_pool()
    if not P then
        return {1}
    end
    local out = {}
    for p = 0, P.n - 1 do
        if p < P.t then
            local st = get(P, p, 'st')
            local field = ''
            if st == 1 or st == 2 then
                field = rec_field(P, p)
            end
            out[#out + 1] = {st, field, get(P, p, 'dl')}
        else
            out[#out + 1] = {0, '', 0}
        end
    end
    flush_all()
    return {0, out}
end

-- Verify one pool (its uses applied first): nil, or what is wrong.
local function check_pool(nsx, rank)
    local pfx = pfx_of(nsx, rank)
    local m = redis.call('HMGET', pfx .. 'm', 'n', 't', 'h', 'l', 'own', 'res', 'dr')
    local n, t, head, tail = tonumber(m[1]), tonumber(m[2]), tonumber(m[3]), tonumber(m[4])
    local own, res, dr = tonumber(m[5]), tonumber(m[6]), tonumber(m[7])
    local where = 'pool ' .. nsx .. '/' .. rank .. ': '
    if t > n then return where .. 'mark above num_pages' end
    local st, dl, prev, nxt, keys, writers, wend = {}, {}, {}, {}, {}, {}, {}
    local counts = {[0] = 0, 0, 0, 0}
    local P = {pfx = pfx, rc = {}, rd = {}, xo = {}}
    for c = 0, math.floor((t - 1) / CHUNK) do
        local s = redis.call('GET', pfx .. 'r' .. c) or ''
        local last = math.min(t - 1, c * CHUNK + CHUNK - 1)
        for p = c * CHUNK, last do
            local r = parse_at(nil, s, (p - c * CHUNK) * RS + 1)
            P.rc[p] = r -- rec_field below reads it from here, not from Redis again
            local a, kind, pv, nx, w, d, we = r.st, r.kind, r.prev, r.next, r.w, r.dl, r.wdl
            st[p], dl[p], prev[p], nxt[p], writers[p], wend[p] = a, d, pv, nx, w, we
            if w ~= 0 and (a ~= 2 or we <= 0 or d < we) then
                return where .. 'page ' .. p .. ' has writers but is not owned and protected'
            end
            if a > 3 then return where .. 'page ' .. p .. ' in state ' .. a end
            counts[a] = counts[a] + 1
            if a == 1 or a == 2 then
                keys[p] = rec_field(P, p)
                if kind == 0 then return where .. 'page ' .. p .. ' without a key' end
            elseif kind ~= 0 then
                return where .. 'free or draining page ' .. p .. ' holds a key'
            end
        end
    end
    if counts[2] ~= own or counts[1] ~= res or counts[3] ~= dr then
        return where .. 'state counts disagree: owned ' .. counts[2] .. '/' .. own ..
            ', reserved ' .. counts[1] .. '/' .. res .. ', draining ' .. counts[3] .. '/' .. dr
    end
    local idx = redis.call('HGETALL', pfx .. 'k')
    if #idx / 2 ~= own then return where .. 'index holds ' .. (#idx / 2) .. ' keys, owned ' .. own end
    for j = 1, #idx, 2 do
        local p = tonumber(idx[j + 1])
        if not p or p >= t or st[p] ~= 2 or keys[p] ~= idx[j] then
            return where .. 'index entry for page ' .. idx[j + 1] .. ' disagrees with its record'
        end
    end
    local seen, p, back = 0, head, NIL
    while p ~= NIL do
        if p >= t or st[p] ~= 2 or prev[p] ~= back then return where .. 'LRU broken at page ' .. p end
        seen = seen + 1
        if seen > own then return where .. 'LRU longer than the owned count' end
        back = p
        p = nxt[p]
    end
    if seen ~= own or back ~= tail then return where .. 'LRU length or tail wrong' end
    -- reservation batches: every RESERVED page is in the batch its record
    -- names, with the batch's deadline; every batch counts its RESERVED pages
    local e = redis.call('ZRANGE', pfx .. 'e', 0, -1, 'WITHSCORES')
    local bn = redis.call('HGETALL', pfx .. 'bn')
    local bp = redis.call('HGETALL', pfx .. 'bp')
    if #bn ~= #e or #bp ~= #e then return where .. 'reservation batches disagree in number' end
    local bdl, bcount, inbatch = {}, {}, {}
    for j = 1, #e, 2 do bdl[tonumber(e[j])] = tonumber(e[j + 1]) end
    for j = 1, #bn, 2 do bcount[tonumber(bn[j])] = tonumber(bn[j + 1]) end
    local total = 0
    for j = 1, #bp, 2 do
        local b = tonumber(bp[j])
        if not bdl[b] or not bcount[b] then return where .. 'batch ' .. b .. ' half recorded' end
        local live = 0
        for q in string.gmatch(bp[j + 1], '%d+') do
            q = tonumber(q)
            if q >= t then return where .. 'batch ' .. b .. ' names page ' .. q .. ' above the mark' end
            if st[q] == 1 and wend[q] == b then
                live = live + 1
                inbatch[q] = true
                if dl[q] ~= bdl[b] then return where .. 'reservation of page ' .. q .. ' wrong' end
            end
        end
        if live == 0 or live ~= bcount[b] then
            return where .. 'batch ' .. b .. ' counts ' .. bcount[b] .. ', holds ' .. live
        end
        total = total + live
    end
    if total ~= res then return where .. 'reservation batches hold ' .. total .. ', reserved ' .. res end
    for p = 0, t - 1 do
        if st[p] == 1 and not inbatch[p] then return where .. 'reserved page ' .. p .. ' in no batch' end
        if st[p] ~= 1 and writers[p] == 0 and wend[p] ~= 0 then
            return where .. 'page ' .. p .. ' keeps a batch or lease end without writers'
        end
    end
    local d = redis.call('ZRANGE', pfx .. 'd', 0, -1, 'WITHSCORES')
    if #d / 2 ~= dr then return where .. 'draining set size wrong' end
    for j = 1, #d, 2 do
        local q = tonumber(d[j])
        if st[q] ~= 3 or dl[q] ~= tonumber(d[j + 1]) then return where .. 'drain of page ' .. q .. ' wrong' end
    end
    local wz = redis.call('ZRANGE', pfx .. 'w', 0, -1, 'WITHSCORES')
    local nw = 0
    for p = 0, t - 1 do
        if writers[p] ~= 0 then nw = nw + 1 end
    end
    if #wz / 2 ~= nw then return where .. 'write lease set size wrong' end
    for j = 1, #wz, 2 do
        local q = tonumber(wz[j])
        if writers[q] == 0 or wend[q] ~= tonumber(wz[j + 1]) then
            return where .. 'write lease of page ' .. q .. ' wrong'
        end
    end
    local f = redis.call('LRANGE', pfx .. 'f', 0, -1)
    if #f ~= counts[0] then return where .. 'free list holds ' .. #f .. ' pages, ' .. counts[0] .. ' free below the mark' end
    local onlist = {}
    for j = 1, #f do
        local q = tonumber(f[j])
        if q >= t or st[q] ~= 0 or onlist[q] then return where .. 'free list entry ' .. q .. ' wrong' end
        onlist[q] = true
    end
    return nil
end

-- check: verify every pool; {0, ''} or {0, description}
local function op_check()
    local nss = redis.call('SMEMBERS', 'hfm:nss')
    for i = 1, #nss do
        local ranks = ns_ranks(nss[i])
        for r = 1, #ranks do
            local P = pool_change(nss[i], ranks[r])
            if not P then
                return {0, 'namespace ' .. nss[i] .. ' lists rank ' .. ranks[r] .. ' without a pool'}
            end
        end
    end
    flush_all()
    for i = 1, #nss do
        local ranks = ns_ranks(nss[i])
        for r = 1, #ranks do
            local bad = check_pool(nss[i], ranks[r])
            if bad then
                return {0, bad}
            end
        end
    end
    return {0, ''}
end

-- pool_check nsx rank (over a cluster, for each pool the registry lists)
local function op_pool_check()
    local nsx, rank = ARGV[A], ARGV[A + 1]
    if not pool_change(nsx, rank) then
        return {0, 'namespace ' .. nsx .. ' lists rank ' .. rank .. ' without a pool'}
    end
    flush_all()
    return {0, check_pool(nsx, rank) or ''}
end

-- use nsx rank misses field page... (over a cluster: the second half of a
-- completeness read, whose first half read each pool's index): the uses of
-- the keys found complete, for those keys that still own the page read
-- (a change may have run between the two halves), and the misses:
-- {0, {1 if the key still owns its page, else 0, ...}}; the caller answers
-- a key complete only if every rank still has it (so every page it answers
-- is leased)
local function op_use()
    local nsx, rank = ARGV[A], ARGV[A + 1]
    local pfx = pfx_of(nsx, rank)
    if redis.call('EXISTS', pfx .. 'm') == 0 then
        return {0, {}}
    end
    local fields = {}
    for i = A + 3, #ARGV, 2 do
        fields[#fields + 1] = ARGV[i]
    end
    local v = hmget(pfx .. 'k', fields, 1)
    local used, still = {}, {}
    for i = 1, #fields do
        local page = ARGV[A + 2 + 2 * i]
        still[i] = v[i] == page and 1 or 0
        if v[i] == page then
            used[#used + 1] = page
        end
    end
    log_uses(nsx, rank, tonumber(ARGV[A + 2]), used)
    flush_all()
    return {0, still}
end

-- demote nsx rank field... (over a cluster: keys that left another rank of
-- nsx, in the order they left)
local function op_demote()
    local P = pool_change(ARGV[A], ARGV[A + 1])
    if not P then
        return {0}
    end
    for i = A + 2, #ARGV do
        local q = idx_find(P, ARGV[i])
        if q and get(P, q, 'dl') <= now then
            lru_remove(P, q)
            lru_push_head(P, q)
        end
    end
    flush_all()
    return {0}
end

-- drop nsx rank (over a cluster, clear_all pool by pool): the pool's keys
local function op_drop()
    redis.call('UNLINK', unpack(pool_keys(ARGV[A], ARGV[A + 1])))
    return {0}
end

local OPS = {init = op_init, allocate = op_allocate, confirm = op_confirm, read = op_read,
             complete = op_complete, delete = op_delete, clear_pool = op_clear_pool,
             clear_all = op_clear_all, stats = op_stats, pages = op_pages, check = op_check,
             use = op_use, demote = op_demote, pool_stats = op_pool_stats,
             pool_check = op_pool_check, drop = op_drop}

local f = OPS[op]
if not f then
    return redis.error_reply('hf3fs-metad: unknown op ' .. tostring(op))
end
return f()
