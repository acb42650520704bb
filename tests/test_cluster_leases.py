"""Leases and membership of a cluster (gateway/store/leases.py, members.py) on a
throwaway PostgreSQL, and the refusal of a transaction-pooled coordinator."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from datetime import UTC
from pathlib import Path

import pytest
from sqlalchemy import make_url, text

from gateway.cluster import ClusterNode, check_session_pooling
from gateway.errors import StoreError
from gateway.store import Store
from gateway.store.leases import Leases, Singleton, claim, leases, release, renew
from gateway.store.liveness import MemberSession
from gateway.store.members import heartbeat, join, leave, live_members, members
from gateway.testing.postgres import PG_BINARIES, create_database, free_port
from gateway.zones import PersonZones
from tests.test_memory_postgres import postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@pytest.fixture
async def pg(postgres: str) -> AsyncIterator[Store]:
    async with Store(await create_database(postgres)) as store:
        yield store


async def expire(store: Store, name: str) -> None:
    """Move a lease's end into the past, as if its holder stopped renewing long ago."""
    async with store.engine.begin() as connection:
        await connection.execute(
            text("UPDATE cluster_leases SET until = now() - interval '1 second' WHERE name = :n"),
            {"n": name},
        )


async def test_a_lease_has_one_holder_until_it_runs_out(pg: Store) -> None:
    assert await claim(pg, "poller", "a", 30)
    assert not await claim(pg, "poller", "b", 30)
    assert await claim(pg, "poller", "a", 30)  # the holder may claim again (a renewal)
    assert await renew(pg, "poller", "a", 30)
    assert not await renew(pg, "poller", "b", 30)
    await expire(pg, "poller")
    # Ran out: the old holder can no longer renew (it must stop), another takes it.
    assert not await renew(pg, "poller", "a", 30)
    assert await claim(pg, "poller", "b", 30)
    assert not await claim(pg, "poller", "a", 30)
    [state] = await leases(pg)
    assert (state.name, state.holder, state.held) == ("poller", "b", True)
    await release(pg, "poller", "a")  # not the holder: nothing happens
    assert (await leases(pg))[0].holder == "b"
    await release(pg, "poller", "b")
    assert await leases(pg) == []


async def test_many_claims_at_once_give_one_holder(pg: Store) -> None:
    won = await asyncio.gather(*(claim(pg, "race", f"h{n}", 30) for n in range(12)))
    assert sum(won) == 1


async def test_a_lease_runs_out_on_the_servers_clock(pg: Store) -> None:
    assert await claim(pg, "short", "a", 0.5)
    assert not await claim(pg, "short", "b", 0.5)
    await asyncio.sleep(0.8)
    assert await claim(pg, "short", "b", 0.5)


async def test_a_singleton_starts_stops_and_hands_over(pg: Store) -> None:
    events: list[str] = []

    def runner(name: str) -> Singleton:
        async def start() -> None:
            events.append(f"{name} start")

        async def stop() -> None:
            events.append(f"{name} stop")

        return Singleton(pg, "job", name, 30, start=start, stop=stop)

    first, second = runner("a"), runner("b")
    await first.tick()
    await second.tick()
    assert (first.held, second.held) == (True, False)
    assert events == ["a start"]
    # Another took it once it ran out: the old holder's next renewal stops its work.
    await expire(pg, "job")
    await second.tick()
    await first.tick()
    assert (first.held, second.held) == (False, True)
    assert events == ["a start", "b start", "a stop"]
    # A clean stop gives the lease back at once: the other needs no lease_s to wait.
    task = asyncio.create_task(second.run())
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert events[-1] == "b stop"
    assert await leases(pg) == []
    await first.tick()
    assert first.held


async def test_a_singleton_stops_while_its_member_session_is_lost(pg: Store) -> None:
    # While this member's session lock is gone the others count it dead and may take
    # its lease: its work stops, and it claims nothing until the session is back.
    events: list[str] = []
    session = {"alive": True}

    async def start() -> None:
        events.append("start")

    async def stop() -> None:
        events.append("stop")

    single = Singleton(
        pg, "poller", "a", 30, start=start, stop=stop, session_alive=lambda: session["alive"]
    )
    await single.tick()
    assert single.held
    session["alive"] = False
    await single.tick()
    assert not single.held
    assert events == ["start", "stop"]
    assert await claim(pg, "poller", "b", 30) is False  # its row is still a's until it ends
    await single.tick()
    assert events == ["start", "stop"]  # no claim while the session is lost
    session["alive"] = True
    await single.tick()
    assert single.held
    assert events == ["start", "stop", "start"]


async def test_a_holder_that_cannot_reach_the_store_stops_by_its_own_clock(pg: Store) -> None:
    stopped = asyncio.Event()

    async def nothing() -> None:
        return None

    async def stop() -> None:
        stopped.set()

    single = Singleton(pg, "cut-off", "a", 0.6, start=nothing, stop=stop)
    await single.tick()
    assert single.held
    await pg.close()  # the store is gone: every renewal fails
    await single.tick()
    assert single.held  # still within its lease
    await asyncio.sleep(0.7)
    await single.tick()
    assert not single.held
    assert stopped.is_set()
    await pg.open()


async def test_hold_is_one_process_at_a_time_and_given_back(pg: Store) -> None:
    a, b = Leases(pg, "a", 30), Leases(pg, "b", 30)
    async with a.hold("observe:1") as held:
        assert held
        async with b.hold("observe:1") as other:
            assert not other
    async with b.hold("observe:1") as other:
        assert other


async def test_members_are_alive_while_they_beat(pg: Store) -> None:
    sessions = [MemberSession(pg.url, m, lease_s=30) for m in ("host:1:aa", "host:2:bb")]
    for session in sessions:
        await session.start()
    try:
        await join(pg, "host:1:aa", listen="127.0.0.1:8001", version="1")
        await join(pg, "host:2:bb", listen="127.0.0.1:8002", version="1")
        assert {m.id for m in await live_members(pg, 30)} == {"host:1:aa", "host:2:bb"}
        await asyncio.sleep(0.6)
        assert await heartbeat(pg, "host:1:aa")
        # host:2 has not beaten for longer than this lease: dead, though its row stays.
        assert [m.id for m in await live_members(pg, 0.5)] == ["host:1:aa"]
        everyone = {m.id: m for m in await members(pg, 0.5)}
        assert not everyone["host:2:bb"].alive
        assert everyone["host:2:bb"].lag_s >= 0.5
        await claim(pg, "poller", "host:1:aa", 30)
        await leave(pg, "host:1:aa")
        assert [m.id for m in await members(pg, 30)] == ["host:2:bb"]
        assert await leases(pg) == []  # a member that leaves gives its leases back
        assert not await heartbeat(pg, "host:1:aa")
    finally:
        for session in sessions:
            await session.aclose()


async def _died(session: MemberSession) -> None:
    """End a member's session as a SIGKILL does: the socket closes, no goodbye."""
    connection = session._connection
    assert connection is not None
    connection.terminate()
    if session._task is not None:
        session._task.cancel()
        await asyncio.gather(session._task, return_exceptions=True)


async def test_a_member_whose_session_ends_is_gone_at_once(pg: Store) -> None:
    # A holds a lease and a turn's claim with 30 s to go, then dies: B takes both at
    # once, counts A dead and is told of it, without waiting for the lease to end.
    from datetime import UTC, datetime

    from gateway.store.claims import TurnClaims, open_heads
    from gateway.store.repo import resolve_address, store_inbound

    told: list[set[str]] = []
    dying_claims = TurnClaims(pg.url, "host:1:dying", 30)
    alive_claims = TurnClaims(pg.url, "host:2:alive", 30)
    a = MemberSession(pg.url, "host:1:dying", lease_s=30)
    b = MemberSession(pg.url, "host:2:alive", lease_s=30, on_gone=told.append, every_s=0.1)
    await a.start()
    await b.start()
    try:
        for member in ("host:1:dying", "host:2:alive"):
            await join(pg, member, listen="127.0.0.1:1", version="1")
        address = await resolve_address(pg, "webchat", "gone-session")
        await store_inbound(pg, address, "hello", datetime.now(UTC), "c0")
        conversation = address.conversation_id
        assert await dying_claims.claim(conversation) is not None
        assert await claim(pg, "poller", "host:1:dying", 30)
        # While A lives, neither is B's.
        assert await alive_claims.claim(conversation) is None
        assert not await claim(pg, "poller", "host:2:alive", 30)
        assert len(await live_members(pg, 30)) == 2
        # A holder that never had a member session is left to its lease's end.
        assert await claim(pg, "batch", "not-a-member", 30)
        assert not await claim(pg, "batch", "host:2:alive", 30)

        await _died(a)
        for _ in range(100):
            if told:
                break
            await asyncio.sleep(0.05)
        assert told == [{"host:1:dying"}]
        assert [m.id for m in await live_members(pg, 30)] == ["host:2:alive"]
        [head], _now = await open_heads(pg)
        assert head.holder_gone
        states = {state.name: state for state in await leases(pg)}
        assert states["poller"].remaining_s > 20
        assert not states["poller"].held
        taken = await alive_claims.claim(conversation)
        assert taken is not None
        assert taken.text == "hello"
        assert await claim(pg, "poller", "host:2:alive", 30)
    finally:
        await a.aclose()
        await b.aclose()
        await dying_claims.aclose()
        await alive_claims.aclose()


async def test_a_node_joins_and_leaves(pg: Store) -> None:
    node = ClusterNode(pg, lease_s=30, listen="127.0.0.1:1", version="t")
    await node.start()
    status = await node.status()
    assert status["ok"]
    assert status["member_id"] == node.member_id
    await node.aclose()
    assert await members(pg, 30) == []


async def test_leases_refuse_sqlite(tmp_path: Path) -> None:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}") as store:
        with pytest.raises(StoreError, match="PostgreSQL"):
            await claim(store, "x", "a", 10)


@pytest.fixture(scope="module")
def pgbouncer(postgres: str) -> Iterator[dict[str, str]]:
    """PgBouncer in front of the throwaway server: one in transaction pooling, one in
    session pooling; their URLs without a database name."""
    if not Path(PGBOUNCER).exists():
        pytest.skip("pgbouncer is not installed (scripts/setup installs it)")
    server = make_url(postgres)
    root = Path(tempfile.mkdtemp(prefix="agentgw-pgbouncer-"))
    # PgBouncer refuses to run as root: then it runs as Debian's postgres user.
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    processes: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for mode in ("transaction", "session"):
            port = free_port()
            ini = root / f"{mode}.ini"
            ini.write_text(
                "[databases]\n"
                f"* = host=127.0.0.1 port={server.port}\n"
                "[pgbouncer]\n"
                f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
                f"unix_socket_dir = {root}\nauth_type = trust\n"
                f"auth_file = {root / 'users.txt'}\npool_mode = {mode}\n"
                "default_pool_size = 4\nignore_startup_parameters = extra_float_digits\n"
                f"logfile = {root / mode}.log\npidfile = {root / mode}.pid\n",
                encoding="utf-8",
            )
            (root / "users.txt").write_text('"postgres" ""\n', encoding="utf-8")
            processes.append(
                subprocess.Popen([*as_user, PGBOUNCER, str(ini)], stderr=subprocess.DEVNULL)
            )
            urls[mode] = f"postgresql+asyncpg://postgres@127.0.0.1:{port}"
        yield urls
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)
        shutil.rmtree(root, ignore_errors=True)


async def _reachable(url: str) -> None:
    for _ in range(50):
        try:
            await check_session_pooling(url)
            return
        except StoreError as exc:
            if "cannot" not in str(exc):
                return
            await asyncio.sleep(0.1)


async def test_a_transaction_pooled_coordinator_is_refused(
    postgres: str, pgbouncer: dict[str, str]
) -> None:
    database = make_url(await create_database(postgres)).database
    pooled = f"{pgbouncer['transaction']}/{database}"
    await _reachable(pooled)
    with pytest.raises(StoreError, match="transaction pooling") as refused:
        await check_session_pooling(pooled)
    assert "pool_mode = session" in str(refused.value)
    # Session pooling and a direct connection keep the session: accepted.
    session = f"{pgbouncer['session']}/{database}"
    await _reachable(session)
    await check_session_pooling(session)
    await check_session_pooling(f"{postgres}/{database}")


async def test_two_processes_judging_one_conversation_take_turns_on_its_row(pg: Store) -> None:
    # Two stores on one database stand for two gateways. While one holds the
    # conversation's row (its judge's transaction), the other's verdict waits: it
    # then reads the EWMA the first stored, and the chain does not fork.
    from datetime import UTC, datetime

    from gateway.store.repo import resolve_address, store_inbound
    from persona.judge import SyncScorer
    from tests.test_persona_judge import POLICY, FixedJudge, item, state_with_rules

    address = await resolve_address(pg, "webchat", "cluster-judge")
    stored = await store_inbound(pg, address, "m", datetime.now(UTC), None)
    async with Store(pg.url) as other:
        scorer = SyncScorer(other, FixedJudge([0.5]), POLICY)
        async with pg.engine.begin() as holding:
            await holding.execute(
                text("SELECT id FROM conversations WHERE id = :c FOR NO KEY UPDATE"),
                {"c": address.conversation_id},
            )
            judging = asyncio.create_task(
                scorer.score(
                    turn_id=stored.turn_id,
                    conversation_id=address.conversation_id,
                    reply_message_id=None,
                    item=item("x", state_with_rules()),
                )
            )
            await asyncio.sleep(0.5)
            assert not judging.done()  # waits for the other transaction
        verdict = await asyncio.wait_for(judging, 10)
    assert verdict.ewma == 0.5


async def test_one_process_observes_a_conversation_at_a_time(pg: Store) -> None:
    # The observer pass of a conversation another gateway is observing now is skipped
    # (its lease is held); once given back, this process's pass runs.
    from gateway.store.repo import resolve_address, store_inbound
    from persona.observation.log import ObservationLog
    from tests.test_observe import AT, pass_in_zone

    address = await resolve_address(pg, "webchat", "cluster-observe", "Sam")
    await store_inbound(pg, address, "I live in Boston and work as a nurse.", AT, None)
    observe = pass_in_zone(pg, ObservationLog(pg), PersonZones(pg, UTC))
    observe.leases = Leases(pg, "this", 30)
    other = Leases(pg, "other", 30)
    async with other.hold(f"observe:{address.conversation_id}") as held:
        assert held
        assert await observe.run(address.conversation_id, address.person_id, force=True) is None
    result = await observe.run(address.conversation_id, address.person_id, force=True)
    assert result is not None
    assert result.observed_messages == 1


async def test_a_persona_version_waits_for_the_other_process_merge(pg: Store) -> None:
    # Read, merge and commit of the persona's next version run under one lease: while
    # another process holds it (merging), this pass waits, and commits after it.
    from gateway.store.repo import finish_turn, resolve_address, store_inbound
    from persona.models import SyncScoreRow, VerdictStatus
    from persona.observation.log import ObservationLog
    from tests.test_observe import AT, pass_in_zone

    address = await resolve_address(pg, "webchat", "cluster-persona", "Sam")
    inbound = await store_inbound(pg, address, "Tell me briefly.", AT, None)
    reply = await finish_turn(pg, inbound, "Noted. Short answer: yes.", {})
    async with pg.session() as session:
        session.add(
            SyncScoreRow(
                turn_id=inbound.turn_id,
                conversation_id=address.conversation_id,
                reply_message_id=reply.id,
                status=VerdictStatus.SCORED,
                judge="fixed",
                composite=0.9,
                ewma=0.9,
            )
        )
    observe = pass_in_zone(pg, ObservationLog(pg), PersonZones(pg, UTC))
    observe.leases = Leases(pg, "this", 30)
    other = Leases(pg, "other", 30)
    async with other.hold("persona-version") as held:
        assert held
        passing = asyncio.create_task(
            observe.run(address.conversation_id, address.person_id, force=True)
        )
        await asyncio.sleep(0.8)
        assert not passing.done()  # waiting for the other process's merge
        assert await observe.book.current() is not None
        before = (await observe.book.current()).version
    result = await asyncio.wait_for(passing, 30)
    assert result is not None
    assert result.persona_version == before + 1
