"""Decode steps alike, run together: while every running request decodes and nothing waiting can be
admitted, each step is the last one plus a token a request (or its drafts), so the engine's scheduling
is skipped and only what changes is computed. The times, tokens and blocks are what scheduling each
step alone gives (tests/engine/test_serving_sim.py runs both); a run ends where something else could
happen: an arrival that could be admitted, a request finishing, blocks that might run short.

Without drafts a run is the requests advanced once after summing the steps' times, each the last plus
one token of every request's cache read. With drafts each step draws every request's accepted drafts,
in the order scheduling would, so the same seed gives the same acceptances.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.accounting.serving.engine import Engine


def can_run(e: "Engine") -> bool:
    if e.execute is not None or e.held or not e.running:
        return False
    if e.waiting and len(e.running) < e.cfg.max_num_seqs and not e.head_blocked:
        return False
    per = 1 + (e.drafter.tokens if e.drafter else 0)
    if len(e.running) * per > e.cfg.max_num_batched_tokens:
        return False
    return all(r.out and r.computed == r.prompt + r.out - 1 for r in e.running)


def run(e: "Engine", now: float, upcoming: float) -> float:
    """Steps until the next arrival could be admitted, a request finishes, or blocks may run short;
    returns the end of the last one."""
    per = 1 + (e.drafter.tokens if e.drafter else 0)
    room = e.pool.free // len(e.running) - 1  # blocks each request may take, the first partial one aside
    steps = room * e.cfg.block_size // per  # a request takes at most `per` tokens a step
    if steps < 1:
        scheduled, drafts = e._schedule()
        return e._finish_step(now, scheduled, drafts)
    admits = not e.waiting and len(e.running) < e.cfg.max_num_seqs
    if e.drafter is None:
        return _plain(e, now, upcoming if admits else float("inf"), steps)
    return _drafted(e, now, upcoming if admits else float("inf"), steps)


def _record(e: "Engine", now: float, seconds: float, used: int) -> None:
    st = e.series
    st.start_s.append(now)
    st.seconds.append(seconds)
    st.waiting.append(len(e.waiting))
    st.running.append(len(e.running))
    st.blocks_used.append(used)


def _plain(e: "Engine", now: float, upcoming: float, steps: int) -> float:
    running, step, cfg = e.running, e.step, e.cfg
    n = len(running)
    steps = min(min(r.max_out - r.out for r in running), steps)
    base = step.forward(n) + step.sampling(n) + step.floors
    read = sum(step.read(r.computed) for r in running)
    slope = sum(step.read(r.computed + 1) for r in running) - read
    bw, host = step.bandwidth, step.host
    used = e.pool.used
    done = 0
    while done < steps:
        seconds = base + (read + done * slope) / bw
        seconds = seconds if seconds > host else host
        _record(e, now, seconds, used)
        now += seconds
        done += 1
        if now >= upcoming:
            break
    e.series.decode_tokens += n * done
    fresh = 0
    for r in running:
        r.computed += done
        r.out += done
        grown = cfg.blocks_for(r.computed) - r.shared - r.blocks
        if grown > 0:
            r.blocks += grown
            fresh += grown
        if r.out >= r.max_out:
            r.finish = now
    e.pool.take(fresh)
    if any(r.finish >= 0 for r in running):
        e._retire(now)
    return now


def _drafted(e: "Engine", now: float, upcoming: float, steps: int) -> float:
    running, step, st, drafter = e.running, e.step, e.series, e.drafter
    assert drafter is not None
    k = drafter.tokens
    n = len(running)
    tokens = n * (1 + k)
    ahead = 1 + 2 * k  # the token, its drafts, and as many lookahead slots (vLLM's EAGLE path)
    blocks_for, read_of = e.cfg.blocks_for, step.read
    draw, alpha = e.rng.random, drafter.acceptance_rate  # Engine._accepted, inline: the same draws
    done = finished = got_all = 0
    while done < steps and not finished:
        read = 0.0
        fresh = 0
        for r in running:
            read += read_of(r.computed)
            need = blocks_for(r.computed + ahead) - r.shared - r.blocks
            if need > 0:
                r.blocks += need
                fresh += need
        e.pool.take(fresh)
        seconds = step.seconds(tokens=tokens, sequences=tokens, read_bytes=read, attention=0.0)
        seconds += step.draft_seconds(drafter, n, read)
        _record(e, now, seconds, e.pool.used)
        now += seconds
        for r in running:
            got = 0
            while got < k and draw() < alpha:
                got += 1
            got_all += got
            r.computed += 1 + got
            r.out += min(1 + got, r.max_out - r.out)
            if r.out >= r.max_out:
                r.finish = now
                finished += 1
        done += 1
        if now >= upcoming:
            break
    st.drafts += k * n * done
    st.draft_steps += n * done
    st.decode_tokens += n * done
    st.accepted += got_all
    if finished:
        e._retire(now)
    return now
