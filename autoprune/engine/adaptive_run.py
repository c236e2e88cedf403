"""The rounds of an adaptive analysis (:mod:`autoprune.engine.adaptive` says what is measured and
why): per round, the thresholds are estimated from the table, every group that still needs a
point gets one, chosen as the round starts (groups shared out over torchrun ranks), and the
ranks' points are merged; the file is written after every point, so a killed run resumes where
it stopped."""
from __future__ import annotations

import math
from typing import Any, Callable

import torch.nn as nn

from .adaptive import (COARSE, MAX_ROUNDS, Planner, Thresholds, known_points, next_round,
                       round_points, undecided)
from .adaptive_meter import PointMeter
from .distributed import gather, rank_and_world, shard
from .points import PointRunner
from .store import SensitivityRecord, merge_points, ratio_key


class AdaptiveRun:
    """One adaptive analysis over ``names`` x ``grid`` into ``record`` (every rank's copy) and
    ``own`` (this rank's points, for its shard file); ``write()`` saves after each point;
    ``tick(group)`` reports progress."""

    def __init__(self, model: nn.Module, thresholds: Thresholds, bound: dict[str, Any], *,
                 record: SensitivityRecord, own: SensitivityRecord, names: list[str],
                 grid: list[float], write: Callable[[], Any],
                 tick: Callable[[str], None] = lambda name: None):
        self.model, self.bound = model, bound
        self.runner: PointRunner | None = None  # set before :meth:`run`
        self.meter: PointMeter | Any = None
        self.thresholds, self.record, self.own = thresholds, record, own
        self.planner = Planner.for_target(grid, thresholds.target)
        self.names, self.grid = names, self.planner.grid  # rounded as the record stores ratios
        self.rank, self.world = rank_and_world()
        self.write, self.tick = write, tick
        self.rounds, self.final = 0, []  # rounds that measured something; the last thresholds
        self.decided_early = 0
        # points the estimate evaluated (adaptive_pilot's Pilot, BoundedPilot), handed on
        self.pilots: dict[tuple[str, float], Any] = {}

    def known(self, name: str):
        return known_points(self.record, name, self.grid)

    def settings(self) -> dict[str, Any]:
        """What decides which points are measured (a stored round is continued only for the
        same): the target, the bound asked for and the ratio grid."""
        return {"target": self.thresholds.target.to_json(), **self.bound, "ratios": self.grid}

    def stored(self) -> dict[str, Any] | None:
        """The state a previous session of this same analysis left in the file, else None."""
        state = self.record.extra.get("adaptive")
        if not isinstance(state, dict) or \
                {k: state.get(k) for k in self.settings()} != self.settings():
            return None
        return state

    def done(self) -> bool:
        """True when the file holds this very analysis, finished (nothing to measure)."""
        state = self.stored()
        groups = state.get("groups") if state else None
        return bool(state and state.get("done") is True and isinstance(groups, list) and
                    set(self.names) <= {g for g in groups if isinstance(g, str)})

    def unfinished_round(self) -> tuple[int, list[float], dict[str, Any] | None]:
        """``(index, previous thresholds, round)`` of the round a killed session of this
        analysis left unfinished; the round is None where the file holds none this release
        could have planned (one stored by an older release names whole groups; a damaged one
        names groups this analysis does not measure or ratios off its grid): the next round is
        then planned from the table, which holds every point measured. Where the index or the
        thresholds are not numbers, that planning starts from round 0."""
        state = self.stored()
        now = state.get("round") if state and state.get("done") is False else None
        if not isinstance(now, dict):
            return 0, [], None
        index, points = now.get("index"), now.get("points")
        lists = [now.get(key) for key in ("thresholds", "now", "previous")]
        if not (isinstance(index, int) and not isinstance(index, bool) and
                0 <= index < MAX_ROUNDS and
                all(isinstance(v, list) and all(_number(t) for t in v) for v in lists)):
            return 0, [], None
        planned = isinstance(points, dict) and all(
            name in self.names and _number(r) and ratio_key(r) in self.grid
            for name, r in points.items())
        return index, now["previous"], now if planned else None

    def run(self) -> None:
        """Rounds until no group needs a point (or :data:`MAX_ROUNDS`); a round left unfinished
        by a killed session is continued as it was planned."""
        index, previous, now = self.unfinished_round()
        for _ in range(MAX_ROUNDS):
            if now is None:
                now = self._plan(index, previous)
                if now is None:
                    break
                self._save(now)
            for name in shard(list(now["points"]), self.rank, self.world):
                ratio = ratio_key(float(now["points"][name]))
                known = self.known(name)
                if ratio not in known or undecided(known[ratio], now["thresholds"]):
                    self._measure(name, ratio, now["thresholds"])  # else measured before a kill
            self._share()
            index, previous, now = index + 1, now["now"], None
        self.rounds = index
        self._save(None)

    def _plan(self, index: int, previous: list[float]) -> dict[str, Any] | None:
        """The next round: the thresholds it measures against and each group's one point; None
        when no group needs one."""
        if self.thresholds.target.kind != "loss" and index == 0 and \
                any(not self.known(n) for n in self.names):  # one probe per group, coarse
            points = {n: self.planner.first() for n in self.names if not self.known(n)}
            return {"index": index, "coarse": True, "thresholds": list(COARSE),
                    "now": [], "previous": [], "points": points}
        known = {n: self.known(n) for n in self.names}
        now, work = next_round(self.thresholds, self.planner, known)
        self.final = now
        thresholds = sorted(set(now) | set(previous))  # widened while it moves
        points = round_points(self.planner, known, work, thresholds)
        if not points:
            return None
        return {"index": index, "coarse": False, "now": now, "previous": previous,
                "thresholds": thresholds, "points": points}

    def _save(self, now: dict[str, Any] | None) -> None:
        """The round under way (None: finished) into the file's ``extra["adaptive"]``."""
        self.record.extra["adaptive"] = {
            **self.settings(), "bound_used": getattr(self.meter, "bound", None),
            "groups": list(self.names), "done": now is None,
            "rounds": self.rounds if now is None else now["index"],
            **({"round": now} if now is not None else
               {"thresholds": [t for t in self.final if t == t]})}
        self.write()

    def _measure(self, name: str, ratio: float, thresholds: list[float]) -> None:
        before = self.record.intervals.get(name, {}).get(ratio)
        pilot = self.pilots.pop((name, ratio), None)
        if before is None and pilot is not None:
            before = pilot.before()  # its first images, evaluated by the estimate's pilot
        with self.runner.pruned(name, ratio) as pruned:
            result = self.meter.measure(self.model, thresholds, before, (name, ratio)) \
                if pruned else {"loss": 0.0}
        for rec in (self.record, self.own):
            if "loss" in result:
                rec.set_point(name, ratio, result["loss"])
            else:
                rec.set_interval(name, ratio, result)
        if "loss" not in result:
            self.decided_early += 1
        self.write()
        self.tick(name)

    def _share(self) -> None:
        """Every rank's points of this round merged into every rank's record (rank order)."""
        if self.world == 1:
            return
        for points, intervals in gather((self.own.sensitivities, self.own.intervals)):
            merge_points(self.record, SensitivityRecord(sensitivities=points,
                                                        intervals=intervals))
        self.write()


def _number(value: Any) -> bool:
    """True for a finite int or float (not a bool): what a stored round's numbers must be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
