#!/usr/bin/python3
"""settle_failover.py: pages left reserved after a failover under load.

    bench/settle_failover.py [--clients 4] [--pages 4096] [--watch 12]
                             [--no-settle-replicate]

A Redis Cluster of 3 primaries and 3 replicas (node timeout 2 s), one
hf3fs-metad --redis-wait 1 --redis-timeout 1 over it, a vLLM pool of
--pages pages, and --clients threads that allocate 8 fresh keys and confirm
them, again and again, as the stock clients do (a request answered 500,
502, 503 or 504 is sent again up to 3 times; one answered 507 is not, and
the pages of an allocation not answered 200 are not confirmed). After 1 s the primary of
the pool's anchor is killed (kill -9), its replica promoted, the dead node
restarted as the new primary's replica; the load runs until a change
succeeds again plus 1 s, then stops. From then on the pool's reserved
pages (GET /v1/stats, every stripe summed) are printed every second for
--watch seconds, with the pages that a client was answered and whose
confirmation was not acknowledged (507, or a broken connection): those
stay reserved rightly (the client may still confirm them); the rest were
reserved by allocations answered 507, which nobody will confirm.

The module and binary are those of HF3FS_METAD_BIN (default
build/hf3fs-metad); run it against two builds to compare.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))

import redis_cluster  # noqa: E402
import test_cluster_engine as tce  # noqa: E402


class Load(tce.Load):
    """tce.Load that sends a request again on 500, 502, 503 and 504 up to 3
    times, 0.3 s, 0.6 s, 1.2 s apart, as the stock clients' Retry does
    (never on 507), and records which route each answer was for."""

    def post(self, c, path, body):
        for attempt in range(4):
            if attempt:
                time.sleep(0.3 * 2 ** (attempt - 1))
            r = super().post(c, path, body)
            self.routes.append(path.rsplit("/", 1)[-1])
            if r is None or r.status not in (500, 502, 503, 504):
                break
        if "confirmations" in body and (r is None or r.status != 204):
            self.told += len(body["confirmations"])  # answered, confirm not acknowledged
        return r


def reserved(srv):
    return sum(p["reserved"] for p in srv.stats().values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--pages", type=int, default=4096)
    ap.add_argument("--watch", type=int, default=12)
    ap.add_argument("--no-settle-replicate", action="store_true",
                    help="load the module without settle-replicate (as while a fleet "
                         "upgrades from the previous release)")
    a = ap.parse_args()
    tce.PAGES = a.pages
    # settle-replicate (the shipped configuration's): the replicas learn
    # each allocation's reservations (HF3FS.NOTE), so the promoted one can
    # settle them
    args = [] if a.no_settle_replicate else ["settle-replicate"]
    print("module arguments: %s" % (" ".join(args) or "(none)"))
    with redis_cluster.RedisCluster(primaries=3, replicas=1, node_timeout_ms=2000,
                                    module_args=args) as rc:
        with tce.front_end(rc) as srv:
            tce.init_pool(srv)
            victim = rc.slot_owner(tce.pool_slot(rc))
            loads = [Load(srv, seed=i) for i in range(a.clients)]
            for ld in loads:
                ld.routes = []
                ld.told = 0
                ld.start()
            time.sleep(1.0)
            t_kill = rc.kill9(victim)
            promoted, t_promo = rc.wait_failover(victim)
            rc.restart(victim)
            deadline = t_promo + 15
            while time.monotonic() < deadline and not any(
                    ld.first_success_after(t_promo) for ld in loads):
                time.sleep(0.05)
            time.sleep(1.0)
            for ld in loads:
                ld.finish()
            t_stop = time.monotonic()
            statuses = {}
            for ld in loads:
                for (when, s), route in zip(ld.log, ld.routes):
                    if when >= t_kill:
                        statuses[(route, s)] = statuses.get((route, s), 0) + 1
            print("kill -> promotion %.2f s; answers since the kill: %s; pages answered to a "
                  "client whose confirmation was not acknowledged: %d"
                  % (t_promo - t_kill, dict(sorted(statuses.items())),
                     sum(ld.told for ld in loads)))
            for i in range(a.watch + 1):
                time.sleep(max(0.0, t_stop + i - time.monotonic()))
                settle = srv.client().get("/v1/stats").json()["server"].get("settle")
                print("  %2d s after the load stopped: %d pages reserved; settle %s"
                      % (i, reserved(srv), settle), flush=True)


if __name__ == "__main__":
    main()
