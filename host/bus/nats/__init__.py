"""The bus across processes and machines: the in-memory bus, bridged over NATS.

Each process keeps its own `InMemoryBus` (ACLs, queues, handlers, deliveries
exactly as on one machine) and bridges it to NATS:

- a local publish is delivered locally, then sent to NATS on the subject
  of the same name, with the envelope in NATS headers (source-id,
  principal kind and name, timestamp, host id, message id). The envelope is
  stamped by the host that runs the publisher, never taken from a payload;
- a message from another host is delivered to this host's subscriptions and
  handlers as that host stamped it (its own ACL was checked where it was
  published; NATS subject permissions bound what each host may publish);
- only topics in `shared` cross (the resource requests and replies); all
  others never leave the process nor enter it from NATS (the front doors
  between the MCP server and its broker, the capsule-set event and the
  inventory each host answers for itself).

Early end across hosts: for a message on a `tracked` topic (the resource
requests), every host that received it reports on the done topic of the asking host
which of its participants it reached, once they have all finished. The
publisher's delivery is finished when its local handlers are and every
capsule host it currently knows has reported; a host that dies mid-round
costs at most the waiter's window. Hosts announce themselves every
`NATS_TUNING.heartbeat_s` on the heartbeat topic (with their capsule set); one
silent for `NATS_TUNING.host_timeout_s` is gone. A host appearing, leaving or changing
its capsule set calls `on_membership_change` (the composition root
re-announces capsule sets, so clients get list_changed) only when the set of
capsules served changes: a replica joining or leaving changes nothing a client sees.

Replicas: a capsule host subscribes to the requests once per capsule it
runs, in a NATS queue group named by the capsule's source-id (its name and
build digest), so the same capsule on several hosts forms one group and
each request reaches one replica of it. Its handlers alone get what came
through its group; a plain subscription brings the rest (host participants
outside any group). The receiving replica claims the request at once and
reports when done, per group; the publisher waits for every group its live
hosts announce. A claim whose host stops answering pings (`NATS_TUNING.pong_wait_s`), or a
group nobody claimed within `NATS_TUNING.unclaimed_s`, is published once more for that
group alone (`H_RETRY`): a replica dying mid-request costs about a second,
inside the read window.

nats-py is asyncio-only: one event-loop thread owns the connection; the
rest of the host calls in with `run_coroutine_threadsafe`, and nothing slow
ever runs on that loop (handlers go to the bus's dispatcher).

One job per module: `bus` (`NatsBus`: publish here and there, take in the
others' messages), `connection` (the connection, its loop thread, `--bus`
URL checks), `envelope` (the headers), `subjects` (topics as subjects, a
host's permissions), `membership` (heartbeats, live hosts, pings), `groups`
(the queue groups of replicas), `rounds` (one message's round and its
`ClusterDelivery`), `tracking` (the publisher's rounds: reports, claims,
retries), `reports` (the receiving host's claims and reports).
"""

from astrid.host.bus.nats.bus import NatsBus
from astrid.host.bus.nats.connection import nats_problem
from astrid.host.bus.nats.rounds import ClusterDelivery
from astrid.host.bus.nats.subjects import host_permissions, subject_for

__all__ = ["ClusterDelivery", "NatsBus", "host_permissions", "nats_problem", "subject_for"]
