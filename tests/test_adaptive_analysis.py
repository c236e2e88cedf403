"""Adaptive sensitivity analysis (issue 41): only the points and images the allocation for a
target needs, a point decided early recorded with its interval, resumable and mergeable like the
full analysis (which stays as it was), images counted, the cost said before it starts."""
import contextlib
import json
import math
import re
import types

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

import autoprune
from autoprune.engine.adaptive import Planner, check_target
from autoprune.engine.allocate import threshold_curve
from autoprune.engine.bounds import (PairedCounts, hypergeom_cdf, look_points, mean_interval,
                                     successes_interval)
from autoprune.engine.incremental import Step
from autoprune.engine.store import SensitivityRecord, read_record
from autoprune.errors import ConfigError
from conftest import ToyNet, assert_one_line, needs_fmnist, spawn_ranks

RATIOS = (0.1, 0.3, 0.5, 0.7, 0.9)
STEP = 0.2  # the ratio grid's step


def _patterns_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable 10-class task: a fixed pattern per class under noise."""
    patterns = torch.randn(10, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    return torch.randn(n, 3, 16, 16, generator=g) * 1.5 + patterns[y], y


def _trained_toy() -> ToyNet:
    x, y = _patterns_data(1024, 1)
    torch.manual_seed(0)
    model = ToyNet()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(2):
        for i in range(0, len(x), 64):
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def toy_task():
    """A ToyNet trained in a few seconds (top-1 ~0.9 on 512 held-out images)."""
    model = _trained_toy()
    x, y = _patterns_data(512, 2)
    return model, x, y


class Top1:
    """Top-1 that reports image by image in a seeded random order (the incremental protocol);
    ``stop_after`` steps (over all calls) raises KeyboardInterrupt, as a killed run."""

    random_order = True
    resumable = True

    def __init__(self, x, y, stop_after: int | None = None):
        self.x, self.y, self.images = x, y, len(x)
        self.order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        self.stop_after, self.steps = stop_after, 0

    def __call__(self, model):
        return float((model(self.x).argmax(1) == self.y).double().mean())

    def incremental(self, model, start=0):
        for i in range(start, len(self.x), 64):
            self.steps += 1
            if self.stop_after is not None and self.steps > self.stop_after:
                raise KeyboardInterrupt
            idx = self.order[i:i + 64]
            yield Step(len(idx), scores=(model(self.x[idx]).argmax(1) == self.y[idx]).double())


def _run(model, x, eval_fn, path=None, progress=False, **options):
    return autoprune.sensitivity(model, x[:1], eval_fn, ratios=RATIOS, sensitivities_file=path,
                                 progress=progress, options=options)


def _within_a_step(a, b):
    return all(abs(a.get(g, 0.0) - b.get(g, 0.0)) <= STEP + 1e-9 for g in set(a) | set(b))


# --- the bounds -------------------------------------------------------------------------------
def test_hypergeometric_tail_and_its_inversion_are_exact():
    total, successes, draws = 30, 10, 12
    brute = lambda k: sum(math.comb(successes, j) * math.comb(total - successes, draws - j)
                          for j in range(k + 1)) / math.comb(total, draws)
    for k in range(draws + 1):
        assert hypergeom_cdf(k, total, successes, draws) == pytest.approx(brute(k), abs=1e-12)
        assert hypergeom_cdf(k, total, successes, draws, upper=True) == \
            pytest.approx(1 - brute(k - 1) if k else 1.0, abs=1e-12)
    # coverage: over every sample a population of K successes can give, the interval misses K
    # with probability at most 2 alpha
    alpha, total, draws = 0.05, 40, 15
    for true in (0, 3, 11, 25):
        miss = sum(math.comb(true, k) * math.comb(total - true, draws - k) / math.comb(total, draws)
                   for k in range(draws + 1)
                   if not successes_interval(k, draws, total, alpha)[0] <= true
                   <= successes_interval(k, draws, total, alpha)[1])
        assert miss <= 2 * alpha
    assert successes_interval(4, 40, 40, 1e-6) == (4, 4)  # every item seen: exact


def test_the_exact_bound_holds_whatever_the_unseen_images_score():
    base = torch.tensor([1.0] * 70 + [0.0] * 30)
    counts = PairedCounts()
    counts.add(torch.tensor([1.0] * 20 + [0.0] * 20), base[:40])
    low, high = mean_interval(counts, base, bound="exact", alpha=0.01, binary=True)
    assert (low, high) == (20 / 100, 80 / 100)
    conf = mean_interval(counts, base, bound="confidence", alpha=0.01, binary=True)
    assert low <= conf[0] <= conf[1] <= high  # within the sure range, and narrower
    assert look_points(1000)[:3] == [32, 48, 72] and look_points(1000)[-1] < 1000


def _brute_net_high(d, n1, total1, u, n0, total0, alpha):
    """The largest D - U whose probability of a statistic at most the one seen is above
    ``alpha``: every (D, U) and every sample enumerated."""
    def pmf(k, total, succ, draws):
        return math.comb(succ, k) * math.comb(total - succ, draws - k) / math.comb(total, draws)
    seen = d * total1 * n0 - u * total0 * n1
    best = None
    for big_d in range(total1 + 1):
        for big_u in range(total0 + 1):
            p = sum(pmf(x, total1, big_d, n1) * pmf(y, total0, big_u, n0)
                    for x in range(n1 + 1) for y in range(n0 + 1)
                    if x * total1 * n0 - y * total0 * n1 <= seen)
            if p > alpha:
                best = big_d - big_u if best is None else max(best, big_d - big_u)
    return best


def test_the_joint_bound_on_net_flips_is_the_exact_test_and_holds():
    from autoprune.engine.bounds import _net_high, net_interval
    rng = torch.Generator().manual_seed(3)
    for _ in range(12):  # the banded, vectorised search finds what enumeration finds
        total1, total0 = (int(v) for v in torch.randint(4, 11, (2,), generator=rng))
        n1 = int(torch.randint(1, total1 + 1, (1,), generator=rng))
        n0 = int(torch.randint(1, total0 + 1, (1,), generator=rng))
        d = int(torch.randint(0, n1 + 1, (1,), generator=rng))
        u = int(torch.randint(0, n0 + 1, (1,), generator=rng))
        alpha = (0.02, 0.1, 0.3)[int(torch.randint(0, 3, (1,), generator=rng))]
        assert _net_high(d, n1, total1, (0, total1), u, n0, total0, (0, total0), alpha) == \
            _brute_net_high(d, n1, total1, u, n0, total0, alpha)
    for _ in range(60):  # the strides skipped between solved rows change nothing
        total1, total0 = (int(v) for v in torch.randint(50, 3000, (2,), generator=rng))
        n1 = int(torch.randint(1, total1 + 1, (1,), generator=rng))
        n0 = int(torch.randint(1, total0 + 1, (1,), generator=rng))
        d = int(torch.randint(0, n1 + 1, (1,), generator=rng))
        u = int(torch.randint(0, n0 + 1, (1,), generator=rng))
        box1 = successes_interval(d, n1, total1, 1e-6)
        box0 = successes_interval(u, n0, total0, 1e-6)
        every_row = _net_high(d, n1, total1, box1, u, n0, total0, box0, 1e-4, coarse=10 ** 9)
        assert _net_high(d, n1, total1, box1, u, n0, total0, box0, 1e-4) == every_row
        assert _net_high(d, n1, total1, box1, u, n0, total0, box0, 1e-4, coarse=4) == every_row
    # coverage, exactly: over every sample of a population, the interval misses D - U with
    # probability at most 2.04 alpha
    alpha, total1, total0, n1, n0 = 0.05, 30, 20, 12, 8
    for big_d, big_u in ((0, 0), (4, 9), (17, 3), (30, 20)):
        miss = 0.0
        for x in range(n1 + 1):
            for y in range(n0 + 1):
                p = (math.comb(big_d, x) * math.comb(total1 - big_d, n1 - x)
                     * math.comb(big_u, y) * math.comb(total0 - big_u, n0 - y)
                     / math.comb(total1, n1) / math.comb(total0, n0))
                if p > 0:
                    low, high = net_interval(x, n1, total1, y, n0, total0, alpha)
                    miss += p * (not low <= big_d - big_u <= high)
        assert miss <= 2.04 * alpha
    # an uncertain model flips many images both ways: bounded together, narrower than the two
    # bounds subtracted at the same total confidence
    low, high = net_interval(128, 543, 1293, 50, 289, 707, 1e-5)
    d_lo, d_hi = successes_interval(128, 543, 1293, 2.04e-5 / 4)
    u_lo, u_hi = successes_interval(50, 289, 707, 2.04e-5 / 4)
    assert d_lo - u_hi < low < high < d_hi - u_lo
    assert high - low < 0.75 * ((d_hi - u_lo) - (d_lo - u_hi))
    assert net_interval(3, 10, 20, 0, 0, 5, 0.01) is None  # no baseline-wrong image seen


def test_the_planner_finds_a_bracket_from_the_top():
    """A bracket target probes a group's top ratio first: a group no ratio harms costs that one
    point, a steep one the top (decided far over after a few images) and a jump down the
    ratio-squared curve through it; a convex curve's bracket is found without the points under
    it."""
    planner = Planner(list(RATIOS))

    def walk(curve, t=0.05):
        known = {}
        while (r := planner.next_point(known, [t])) is not None:
            known[r] = (curve[r], curve[r])
        return known

    convex = {0.1: 0.0, 0.3: 0.01, 0.5: 0.03, 0.7: 0.2, 0.9: 0.6}
    known = walk(convex)
    assert {0.5, 0.7} <= set(known) and 0.1 not in known  # 0.5 within, 0.7 over: the bracket
    table = {r: high for r, (_, high) in known.items()}
    assert autoprune.engine.allocate.ratio_for_loss(threshold_curve(table), 0.05) == \
        autoprune.engine.allocate.ratio_for_loss(threshold_curve(convex), 0.05)
    assert set(walk({r: 0.0 for r in RATIOS})) == {0.9}  # flat: one point
    steep = walk({r: 0.5 + r / 2 for r in RATIOS})  # over at every ratio: down to the first
    assert 0.1 in steep and not {0.5, 0.7} & set(steep)
    assert planner.next_point({0.9: (0.0, 0.01)}, [0.05]) is None  # the top within: done
    assert planner.next_point({0.1: (0.06, 0.1)}, [0.05]) is None  # the first over: done
    assert planner.next_point({0.1: (0.02, 0.1)}, [0.05]) == 0.1  # undecided: more images


def test_a_flat_flops_bracket_leaves_one_grid_point_between_its_ends_within_a_step():
    """A FLOPs target's bracket across a flat stretch of curve (rising by at most FLAT_RISE
    thresholds) is resolved with its ends two grid points apart (the point between them, on a
    noise-level curve a whole evaluation, is interpolated across): on any curve that does not
    fall, the allocation's ratio read from the points measured lies within one grid step of
    the ratio read from the whole curve. A steep bracket is measured to adjacent points, a
    latency target's always (its greedy allocation reads measured points only); a loss target
    reads from the top."""
    from autoprune.engine.adaptive import Target
    from autoprune.engine.allocate import ratio_for_loss

    grid = [round(0.1 * i, 2) for i in range(1, 10)]
    flops = Planner.for_target(grid, Target("flops", 0.5))
    assert flops.steps == 2 and not flops.top_down
    assert Planner.for_target(grid, Target("latency", 0.4)).steps == 1
    assert Planner.for_target(grid, Target("loss", 0.05)).top_down
    within, over, steep = (0.0, 0.001), (0.02, 0.025), (0.3, 0.35)
    assert flops.next_point({0.3: within, 0.5: over, 0.9: steep}, [0.01]) is None  # 0.4 left
    assert flops.next_point({0.3: within, 0.5: steep, 0.9: steep}, [0.01]) == 0.4  # steep
    assert flops.next_point({0.3: within, 0.6: over, 0.9: steep}, [0.01]) in (0.4, 0.5)
    assert Planner(grid).next_point({0.3: within, 0.5: over, 0.9: steep}, [0.01]) == 0.4
    gen = torch.Generator().manual_seed(0)
    saved = 0
    for _ in range(300):
        steps = torch.rand(len(grid), generator=gen) ** 3 * 0.02
        curve = dict(zip(grid, torch.cumsum(steps, 0).tolist()))  # non-decreasing
        t = float(torch.rand(1, generator=gen)) * curve[0.9] * 1.2
        known, adjacent = {}, {}
        for planner, points in ((flops, known), (Planner(grid), adjacent)):
            while (r := planner.next_point(points, [t])) is not None:
                points[r] = (curve[r], curve[r])
        read = ratio_for_loss(threshold_curve({r: v for r, (v, _) in known.items()}), t)
        assert abs(read - ratio_for_loss(threshold_curve(curve), t)) <= 0.1 + 1e-9
        assert len(known) <= len(adjacent)
        saved += len(adjacent) - len(known)
    assert saved > 20  # it does leave points out


def test_an_undecided_point_gets_its_images_before_the_points_below_it():
    """A point whose interval straddles the threshold is refined first: were it probed below,
    each point under it, undecided too at a threshold of a few images' loss, would be measured
    in turn down to the first ratio (every point of a flat, noise-level curve)."""
    planner = Planner(list(RATIOS))
    flat = {r: 0.0 for r in RATIOS}  # a group no ratio harms: every loss is noise
    known = {0.5: (0.0, 0.02)}  # seen on part of the images, the threshold 0.001 inside
    assert planner.next_point(known, [0.001]) == 0.5
    measured = []
    while (r := planner.next_point(known, [0.001])) is not None:
        measured.append(r)
        known[r] = (flat[r], flat[r])
    assert measured == [0.5, 0.9]  # refined, then the top: two points, not nine
    # once it is decided over the threshold, the bracket below it is searched
    assert planner.next_point({0.5: (0.01, 0.02)}, [0.001]) in RATIOS[:4]

def test_a_loss_target_reads_each_curve_from_the_top_as_ratios_by_loss_does():
    """ratios_by_loss takes the highest ratio within the tolerance, even above a point over it
    (a noisy curve's dip): the loss target's planner measures from the top ratio down until a
    point is decided within, so the allocation is the full table's; a bracket search from the
    middle would stop at the first crossing and never see the dip."""
    dipping = {0.1: 0.0, 0.3: 0.02, 0.5: 0.08, 0.7: 0.04, 0.9: 0.5}  # 0.7 within 0.05 again
    top_down = Planner(list(RATIOS), top_down=True)
    known = {}
    while (r := top_down.next_point(known, [0.05])) is not None:
        known[r] = (dipping[r], dipping[r])
    assert set(known) == {0.9, 0.7}  # the top over, 0.7 within: done
    table = {r: high for r, (_, high) in known.items()}
    assert autoprune.ratios_by_loss({"g": table}, 0.05) == \
        autoprune.ratios_by_loss({"g": dipping}, 0.05)
    bracket = Planner(list(RATIOS))
    known = {}
    while (r := bracket.next_point(known, [0.05])) is not None:
        known[r] = (dipping[r], dipping[r])
    assert 0.7 not in known  # the first crossing (0.3 -> 0.5) ends a bracket search
    # an undecided point gets its images before the next one down; all over: nothing within
    assert top_down.next_point({0.9: (0.6, 0.7), 0.7: (0.01, 0.2)}, [0.05]) == 0.7
    assert top_down.next_point({r: (0.3, 0.4) for r in RATIOS}, [0.05]) is None


def test_a_curve_not_measured_to_the_top_is_read_extended_to_it(toy_task):
    """The FLOPs threshold is estimated with each curve not yet measured to the grid's top
    extended to it (loss growing as the ratio squared): a group measured only at 0.5 no longer
    counts as unprunable past 0.5, so the first estimate is not far above the final one. Once
    every group's bracket is resolved (its top measured, or a point over the threshold) the
    extension changes nothing: the allocation's threshold is the estimate's."""
    from autoprune.engine.adaptive import Target, Thresholds, extended, threshold_for
    from autoprune.engine.allocate import FlopsModel
    from autoprune.engine.groups import PruningGraph

    model, x, _ = toy_task
    graph = PruningGraph(model, x[:1], [])
    names = [g.name for g in graph.groups]
    flops = FlopsModel(graph, x[:1])
    assert extended({0.5: 0.01}, 0.9) == {0.5: 0.01, 0.9: pytest.approx(0.01 * 3.24)}
    assert extended({0.9: 0.2, 0.1: 0.0}, 0.9) == {0.9: 0.2, 0.1: 0.0}
    coarse = {n: {0.5: 0.001 * (k + 1)} for k, n in enumerate(names)}
    goal = Thresholds(Target("flops", 0.6), lambda: flops)
    plain = threshold_for(flops, coarse, 0.6)
    assert goal.estimate(coarse, 0.9)[0] < plain  # read unprunable past 0.5: too high
    # a resolved table: every group's top measured or a point over the threshold measured
    resolved = {n: {0.3: 0.002 * (k + 1), 0.5: 0.3} if k % 2 else
                {0.5: 0.001, 0.7: 0.004 * (k + 1), 0.9: 0.5} for k, n in enumerate(names)}
    for target in (0.3, 0.5):
        t = threshold_for(flops, resolved, target)
        assert all(max(p) == 0.9 or max(p.values()) > t for p in resolved.values())
        assert Thresholds(Target("flops", target), lambda: flops).estimate(
            resolved, 0.9)[0] == pytest.approx(t, abs=1e-9)


# --- the analysis -----------------------------------------------------------------------------
def test_a_loss_target_gives_the_full_allocation_from_far_fewer_images(toy_task, tmp_path):
    model, x, y = toy_task
    full = _run(model, x, Top1(x, y), tmp_path / "full.json")
    path = tmp_path / "adaptive.json"
    adaptive = _run(model, x, Top1(x, y), path, adaptive=True, target={"loss": 0.05})
    assert _within_a_step(autoprune.ratios_by_loss(full, 0.05),
                          autoprune.ratios_by_loss(adaptive, 0.05))
    full_images = read_record(tmp_path / "full.json").extra["evaluation"]["images_evaluated"]
    record = read_record(path)
    evaluation = record.extra["evaluation"]
    assert evaluation["mode"] == "adaptive" and evaluation["decided_early"] >= 1
    # the points the table holds as intervals, counted from the table itself
    assert evaluation["points_as_intervals"] == sum(map(len, record.intervals.values())) >= 1
    assert evaluation["images_evaluated"] * 2 <= full_images  # 5 ratios, 512 images here
    assert record.extra["adaptive"]["done"] and record.extra["adaptive"]["target"] == {"loss": 0.05}
    assert sum(map(len, adaptive.values())) < sum(map(len, full.values()))
    # a rerun of the finished analysis evaluates nothing
    again = Top1(x, y)
    assert _run(model, x, again, path, adaptive=True, target={"loss": 0.05}) == adaptive
    assert again.steps == 0


@pytest.mark.parametrize("bound", ["confidence", "exact"])
def test_a_point_decided_early_is_marked_with_its_interval(toy_task, tmp_path, bound):
    model, x, y = toy_task
    full = _run(model, x, lambda m: Top1(x, y)(m))
    path = tmp_path / "s.json"
    table = _run(model, x, Top1(x, y), path, adaptive=True, target={"flops": 0.5}, bound=bound)
    record = read_record(path)
    assert record.intervals, "no point was decided early"
    for group, points in record.intervals.items():
        for ratio, info in points.items():
            assert info["images"] < info["of"] == len(x) and info["bound"] == bound
            assert info["low"] <= full[group][ratio] + 1e-12 <= info["high"] + 2e-12
            assert table[group][ratio] == info["high"]  # the table reads it conservatively
            assert info["decided_for"] and (bound == "exact") == ("confidence" not in info)
    data = json.loads(path.read_text())
    assert set(data["intervals"]) == set(record.intervals)
    flops = lambda t: autoprune.ratios_by_flops(model, x[:1], t, 0.5)
    assert abs(flops(table).achieved - 0.5) < 0.02


def test_the_full_analysis_is_unchanged_counts_its_images_and_completes_intervals(toy_task,
                                                                                  tmp_path):
    model, x, y = toy_task
    plain = _run(model, x, lambda m: Top1(x, y)(m))
    path = tmp_path / "s.json"
    assert _run(model, x, Top1(x, y), path) == plain  # the protocol changes nothing here
    evaluation = read_record(path).extra["evaluation"]
    assert evaluation["mode"] != "adaptive" and evaluation["images_evaluated"] % len(x) == 0
    assert evaluation["images_evaluated"] >= (5 * len(RATIOS) + 1) * len(x)  # + baseline
    adaptive_path = tmp_path / "a.json"
    _run(model, x, Top1(x, y), adaptive_path, adaptive=True, target={"flops": 0.5})
    assert read_record(adaptive_path).intervals
    completed = _run(model, x, Top1(x, y), adaptive_path)  # a full run measures them on all
    record = read_record(adaptive_path)
    assert not record.intervals and completed == plain


@pytest.mark.parametrize("goal", [{"loss": 0.05}, {"flops": 0.5}])
def test_a_resumed_adaptive_analysis_equals_an_uninterrupted_one(toy_task, tmp_path, goal):
    model, x, y = toy_task
    whole = tmp_path / "whole.json"
    uninterrupted = _run(model, x, Top1(x, y), whole, adaptive=True, target=goal)
    path = tmp_path / "resumed.json"
    for stop in (25, 15):  # killed twice, mid-point
        with pytest.raises(KeyboardInterrupt):
            _run(model, x, Top1(x, y, stop_after=stop), path, adaptive=True, target=goal)
    assert _run(model, x, Top1(x, y), path, adaptive=True, target=goal) == uninterrupted
    a, b = read_record(whole), read_record(path)
    assert a.intervals == b.intervals and a.extra["adaptive"] == b.extra["adaptive"]


@pytest.mark.parametrize("damage", [
    None, {"index": "1"}, {"index": -3}, {"thresholds": "0.05"}, {"thresholds": [0.01, "x"]},
    {"previous": None}, {"now": [True]}, {"points": {"no.such.group": 0.5}},
    {"points": {"conv1": "0.5"}}, {"points": {"conv1": 0.55}}, {"points": ["conv1"]}])
def test_a_round_of_an_older_release_or_damaged_is_planned_again_from_the_table(
        toy_task, tmp_path, damage):
    """An unfinished round stored by an older release (None here: it names whole groups to
    resolve, ``work``, not one planned point each), or damaged / hand-edited, resumes by
    planning from the file's table: no traceback, the table an uninterrupted analysis ends
    with."""
    model, x, y = toy_task
    path = tmp_path / "s.json"
    goal = {"flops": 0.5}
    whole = _run(model, x, Top1(x, y), path, adaptive=True, target=goal)
    data = json.loads(path.read_text())
    state = data["extra"]["adaptive"]
    first = state["groups"][0]
    round_ = {"index": 1, "coarse": False, "now": state["thresholds"], "previous": [],
              "thresholds": state["thresholds"]}
    if damage is None:
        round_["work"] = state["groups"]
    else:
        points = damage.get("points")
        if isinstance(points, dict):  # "conv1": this model's first group
            damage = {**damage, "points": {first if g == "conv1" else g: r
                                           for g, r in points.items()}}
        round_.update({"points": {first: 0.9}, **damage})
    state.update(done=False, round=round_)
    path.write_text(json.dumps(data))
    assert _run(model, x, Top1(x, y), path, adaptive=True, target=goal) == whole
    assert read_record(path).extra["adaptive"]["done"] is True


def test_a_finished_state_naming_no_list_of_groups_is_measured_again(toy_task, tmp_path):
    model, x, y = toy_task
    path = tmp_path / "s.json"
    whole = _run(model, x, Top1(x, y), path, adaptive=True, target={"loss": 0.05})
    data = json.loads(path.read_text())
    data["extra"]["adaptive"]["groups"] = {"a": 1}
    path.write_text(json.dumps(data))
    assert _run(model, x, Top1(x, y), path, adaptive=True, target={"loss": 0.05}) == whole


def _worker(rank, world, init_file, path, state, goal):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        torch.set_num_threads(1)
        model = ToyNet()
        model.load_state_dict(state)
        x, y = _patterns_data(512, 2)
        _run(model.eval(), x, Top1(x, y), path, progress=True, adaptive=True, target=goal)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                    reason="torch.distributed with gloo is not available")
def test_two_ranks_merge_to_the_single_process_analysis(toy_task, tmp_path):
    model, x, y = toy_task
    goal = {"flops": 0.5}
    single = _run(model, x, Top1(x, y), tmp_path / "one.json", progress=True, adaptive=True,
                  target=goal)
    path = tmp_path / "two.json"
    spawn_ranks(_worker, (2, str(tmp_path / "init"), str(path), model.state_dict(), goal))
    merged = read_record(path)
    one = read_record(tmp_path / "one.json")
    assert merged.sensitivities == {g: p for g, p in one.sensitivities.items()} == \
        {g: dict(sorted(p.items())) for g, p in single.items()}
    assert merged.intervals == one.intervals
    counts = [r.extra["evaluation"] for r in (merged, one)]
    assert counts[0]["decided_early"] == counts[1]["decided_early"]
    # rank 0's pilots (the estimate's, on each group's top ratio) are handed to the rank that
    # measures the point: no point's image is evaluated twice; rank 1 evaluates only its own
    # unpruned model twice more (its per-image scores, and the prefix cache's check)
    assert counts[0]["images_evaluated"] - counts[1]["images_evaluated"] == 2 * 512
    assert not list(tmp_path.glob("two.json.rank*.json"))


def test_a_plain_eval_fn_still_gets_the_point_selection(toy_task, tmp_path):
    model, x, y = toy_task
    full = _run(model, x, lambda m: Top1(x, y)(m))
    path = tmp_path / "s.json"
    table = _run(model, x, lambda m: Top1(x, y)(m), path, adaptive=True, target={"loss": 0.05})
    record = read_record(path)
    assert not record.intervals and record.extra["adaptive"]["bound_used"] == "none"
    assert all(table[g][r] == full[g][r] for g in table for r in table[g])  # exact points
    assert sum(map(len, table.values())) < sum(map(len, full.values()))
    assert _within_a_step(autoprune.ratios_by_loss(full, 0.05),
                          autoprune.ratios_by_loss(table, 0.05))


def test_the_cost_is_said_before_and_a_plan_measures_nothing(toy_task, tmp_path, capsys):
    model, x, y = toy_task
    path = tmp_path / "s.json"
    ev = Top1(x, y)
    names = [g.name for g in autoprune.prunable_groups(model, x[:1])]
    assert _run(model, x, ev, path, adaptive=True, plan=True) == {n: {} for n in names}
    out = capsys.readouterr().out
    assert "analysis cost: 25 points x 512 images" in out and "ETA" in out
    assert "adaptive (eval_metric_loss 0.05, bound confidence)" in out
    # the pilot's first look is 32 images, evaluated in whole steps (Top1's: 64): it says 64
    assert "predicted from a pilot: each group's top ratio on 64 images" in out
    assert not path.exists()  # nothing written
    _run(model, x, ev, path, adaptive=True, plan=True, target="flops=0.5")
    out = capsys.readouterr().out
    assert "adaptive (-50% FLOPs, bound confidence)" in out and "predicted from a pilot" in out
    autoprune.sensitivity(model, x[:1], Top1(x, y), ratios=RATIOS, progress=True,
                          groups=["fuse.0"])
    out = capsys.readouterr().out
    assert "analysis cost: 5 points x 512 images" in out and "ETA" in out


class _EvenFlips:
    """Per-image scores of a point losing ``loss``: the unpruned model's ``base`` with every
    k-th right image flipped (the expected rate, spread evenly), in steps of ``step`` images."""

    def __init__(self, base: torch.Tensor, loss: float, step: int):
        right = torch.nonzero(base > 0.5).flatten()
        self.scores, self.step = base.clone(), step
        flips = round(loss * len(right))
        if flips:
            self.scores[right[torch.linspace(0, len(right) - 1, flips).round().long()]] = 0.0

    def incremental(self, model, start=0):
        for i in range(start, len(self.scores), self.step):
            part = self.scores[i:i + self.step]
            yield Step(len(part), scores=part)


def test_the_images_a_point_is_expected_to_need_are_those_the_bound_stops_at():
    """The loss target's ETA charges each predicted point the images the confidence bound needs
    to decide it, its flips at their expected rate: a point far over the tolerance stops within
    the first looks, one near it needs every image, and the prediction is what PointMeter really
    does on scores that flip at exactly that rate."""
    from autoprune.engine.adaptive_meter import PointMeter
    from autoprune.engine.adaptive_eta import expected_measure

    n = 2000
    base = torch.ones(n, dtype=torch.float64)
    base[::5] = 0.0  # 80 % right
    meter = PointMeter(None, base, n, 0.8, True, bound="confidence", confidence=0.999,
                       resumable=True, random_order=True)
    far, near, below = (expected_measure(meter, loss, 0.05)[0] for loss in (0.6, 0.05, 0.0))
    assert far <= meter.looks[1] and near == n and far < below < n
    for loss in (0.6, 0.2, 0.0):
        meter.eval_fn = _EvenFlips(base, loss, 8)
        result = meter.measure(None, [0.05])
        seen = result.get("images", n)
        predicted = expected_measure(meter, loss, 0.05)[0]
        # within one look (x1.5) and one step of 8 images: the steps overshoot a look
        assert predicted / 1.5 <= seen <= predicted * 1.5 + 8, (loss, seen, predicted)


def test_the_prediction_looks_where_the_meter_does_and_reads_the_pilots_first_images():
    """The meter evaluates whole steps and computes its interval at the end of a step that
    passes a look, so a point decided at the first look (32 images) has cost a whole step (64):
    the prediction counts steps too. On the first images every point sees, a saturated group's
    pilot says more than expected counts: a point near it in loss is taken as decided there only
    if the pilot was (resnet50's stem at 224 px: both ways flips kept its points undecided)."""
    from autoprune.engine.adaptive_eta import expected_measure, pilot_loss, step_looks
    from autoprune.engine.adaptive_meter import PointMeter
    from autoprune.engine.bounds import look_points

    assert step_looks(look_points(1000), 64, 1000) == [64, 128, 192, 256, 384, 576, 832]
    assert step_looks(look_points(1000), 1, 1000) == look_points(1000)
    n = 1000
    base = torch.ones(n, dtype=torch.float64)
    base[::5] = 0.0
    meter = PointMeter(None, base, n, 0.8, True, bound="confidence", confidence=0.999,
                       resumable=True, random_order=True)
    assert expected_measure(meter, 0.6, 0.05)[0] == 32  # at the look itself
    assert expected_measure(meter, 0.6, 0.05, step=64)[0] == 64  # at the step's end
    undecided_pilot = [(0.3, (0.0, 0.8), 64), (0.8, (0.5, 1.0), 64)]
    assert expected_measure(meter, 0.6, 0.05, undecided_pilot[:1], step=64)[0] == 128
    assert expected_measure(meter, 0.6, 0.05, undecided_pilot, step=64)[0] == 64  # nearer: 0.8
    meter.eval_fn = _EvenFlips(base, 0.2, 8)  # a pilot says the evaluation's step: 8 images,
    pilot = pilot_loss(meter, None)  # not the 32 it evaluated
    assert (pilot.seen, pilot.step) == (32, 8)
    for loss in (0.6, 0.2, 0.1):
        meter.eval_fn = _EvenFlips(base, loss, 64)
        seen = meter.measure(None, [0.05]).get("images", n)
        predicted = expected_measure(meter, loss, 0.05, step=64)[0]
        assert seen % 64 == 0 and predicted % 64 == 0 and abs(seen - predicted) <= 64, loss


class _CurveScores:
    """Per-image scores of whichever point is pruned (``runner.pruned``): the unpruned model's,
    with ``curves[group](ratio)`` of its right images flipped, spread evenly (the rate a
    prediction assumes)."""

    random_order = resumable = True

    def __init__(self, base, curves):
        self.base, self.curves, self.point, self.measured = base, curves, None, 0

    @contextlib.contextmanager
    def pruned(self, name, ratio):
        self.point, self.measured = (name, ratio), self.measured + 1
        assert self.measured < 500, "measuring the same points over and over"
        yield True

    def incremental(self, model, start=0):
        scores = self.base.clone()
        right = torch.nonzero(self.base > 0.5).flatten()
        flips = round(self.curves[self.point[0]](self.point[1]) * len(right))
        if flips:
            scores[right[self.flipped(flips, len(right))]] = 0.0
        for i in range(start, len(scores), 64):
            yield Step(len(scores[i:i + 64]), scores=scores[i:i + 64])

    def flipped(self, flips, right):
        """Which of the ``right`` images the point gets wrong: ``flips`` spread from the
        first to the last."""
        return torch.linspace(0, right - 1, flips).round().long()


def _at_rate(count, total):
    """A mask of ``total`` entries, ``count`` of them True, the first ``j`` holding
    ``round(count * j / total)``: arrivals at exactly the rate a prediction assumes."""
    spread = torch.round(count * torch.arange(total + 1, dtype=torch.float64) / total)
    return spread[1:] > spread[:-1]


class _RateScores(_CurveScores):
    """:class:`_CurveScores` whose flips arrive among the right images at exactly their rate
    (:func:`_at_rate`)."""

    def flipped(self, flips, right):
        return _at_rate(flips, right)


def _evenly_right(n, share):
    """An unpruned model's per-image scores: ``share`` of ``n`` right, at exactly that rate
    (:func:`_at_rate`: the composition a prediction assumes)."""
    return _at_rate(share * n, n).double()


TOPS = {"stem": 0.8, "a": 0.3, "b": 0.12, "c": 0.04, "d": 0.0}  # each group's top-ratio loss


def _power_curves(tops=TOPS, power=None):
    """Each group's loss growing to its top ratio's (0.9) as the ratio to ``power``; by default
    as the estimate assumes (:data:`~autoprune.engine.adaptive_curves.CURVE_POWER`)."""
    from autoprune.engine.adaptive_curves import CURVE_POWER

    power = CURVE_POWER if power is None else power
    return {g: (lambda r, top=top: top * (r / 0.9) ** power) for g, top in tops.items()}


class _SquareFlops:
    """A FLOPs model whose groups' MACs (``weight`` each, 1 by default) fall as
    (1 - ratio)^2."""

    def __init__(self, groups, weight=None):
        self.weight = {g: (weight or {}).get(g, 1.0) for g in groups}
        self.total = sum(self.weight.values())

    def predict(self, ratios):
        return self.total - sum(w * (1 - (1 - ratios.get(g, 0.0)) ** 2)
                                for g, w in self.weight.items())


class _CurveMetric(_CurveScores):
    """A bounded metric (no per-image scores: mAP, mIoU) of whichever point is pruned: 0.8 times
    one less ``curves[group](ratio)``, the unpruned model's 0.8; each 64-image step says it as
    the metric of the images seen (``seen``, none where ``says_seen`` is False) under sure
    bounds that decide nothing before the last step."""

    random_order = resumable = False
    says_seen = True

    @contextlib.contextmanager
    def pruned(self, name, ratio):
        with super().pruned(name, ratio):
            yield True
        self.point = None

    @contextlib.contextmanager
    def folded(self):
        yield

    def incremental(self, model, start=0):
        value = 0.8 * (1.0 - (self.curves[self.point[0]](self.point[1]) if self.point else 0.0))
        n = len(self.base)
        for i in range(0, n, 64):
            last = i + 64 >= n
            yield Step(min(64, n - i), low=value if last else 0.0, high=value if last else 1.0,
                       value=value if last else None, seen=value if self.says_seen else None)


def _curve_run(scores, meter, goal, flops, names, grid):
    """An :class:`AdaptiveRun` for ``goal`` of ``names`` measuring with ``meter`` on the
    points ``scores`` serves (its ``record`` a fresh one, written nowhere)."""
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_run import AdaptiveRun

    run = AdaptiveRun(None, Thresholds(goal, flops), {"bound": "confidence", "confidence": 0.999},
                      record=SensitivityRecord(model="m", metric="top1"),
                      own=SensitivityRecord(), names=names, grid=grid, write=lambda: None)
    run.runner, run.meter = scores, meter
    return run


def _measured_on_curves(base, curves, goal, flops, grid, rounds=None, bounded=False,
                        scores_class=_CurveScores):
    """``(meter, {(group, ratio): images})``: the points a real :class:`AdaptiveRun` for
    ``goal`` measures on per-image scores that follow ``curves`` (``scores_class``; a
    ``bounded`` metric: :class:`_CurveMetric`), and the images each ended with (every image:
    ``len(base)``); ``rounds``, a list, gets each round's planned points and the points it
    measured."""
    from autoprune.engine.adaptive_meter import PointMeter

    n, scores = len(base), (_CurveMetric if bounded else scores_class)(base, curves)
    meter = PointMeter(scores, None if bounded else base, n, 0.8, True, bound="confidence",
                       confidence=0.999, resumable=not bounded, random_order=not bounded)
    run = _curve_run(scores, meter, goal, flops, list(curves), grid)
    record = run.record
    if rounds is not None:
        save, pruned = run._save, scores.pruned

        def planned(now):
            if now is not None:
                rounds.append((dict(now["points"]), []))
            save(now)

        def measuring(name, ratio):
            rounds[-1][1].append((name, ratio))
            return pruned(name, ratio)

        run._save, scores.pruned = planned, measuring
    run.run()
    return meter, {(g, r): record.intervals.get(g, {}).get(r, {}).get("images", n)
                   for g, points in record.sensitivities.items() for r in points}


@pytest.mark.parametrize("target", ["loss=0.05", "flops=0.5", "latency=0.4"])
def test_the_predicted_plan_is_what_the_analysis_measures_on_the_curves_it_assumes(target):
    """The ETA's prediction plays the analysis's own rounds (planner, thresholds, bound) against
    the pilot's curves: where the scores follow such curves exactly (right images and flips
    arriving at the rates it assumes, in the evaluation's 64-image steps), it names the very
    points the real :class:`AdaptiveRun` measures and the images each stops at."""
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_eta import expected_measure
    from autoprune.engine.adaptive_play import play_rounds

    n, grid = 2000, [0.1 * k for k in range(1, 10)]  # 0.7000000000000001 is stored as 0.7
    base = _evenly_right(n, 0.8)
    curves = _power_curves()
    flops = _SquareFlops(curves, {"stem": 1.0, "a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0})

    goal = check_target(target)
    meter, measured = _measured_on_curves(base, curves, goal, lambda: flops, grid,
                                          scores_class=_RateScores)
    predicted = play_rounds(curves, Planner.for_target(grid, goal),
                            Thresholds(goal, lambda: flops),
                            lambda loss, ts: expected_measure(meter, loss, ts, step=64))
    assert len(measured) < len(TOPS) * len(grid)
    assert predicted == measured


@pytest.mark.parametrize("target", ["loss=0.05", "flops=0.5"])
def test_a_bounded_metric_is_predicted_from_the_metric_of_its_pilots_first_images(target,
                                                                                 monkeypatch):
    """mAP and mIoU have no per-image flips: the ETA pilots the unpruned model and each group's
    top ratio (and lowest, for a group losing half at the top) on the first look's images
    (whole steps: 64 of 2,000), reads a point's loss as their metrics' over those
    images, and plays the analysis's rounds with every point seeing every image: on a metric
    that follows the curves it assumes, played without roughness, the very points the real
    analysis measures, and its images plus the pilots'. An evaluation whose steps say no
    metric of the images seen gives no prediction (the prior then): its pilot stops at twice
    the pilot's images."""
    from autoprune.engine import adaptive_play
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_eta import pilot_seen, predicted_shares

    monkeypatch.setattr(adaptive_play, "ROUGHNESS", 0.0)
    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    base = torch.ones(n, dtype=torch.float64)
    curves, flops = _power_curves(), _SquareFlops(TOPS)
    goal = check_target(target)
    meter, measured = _measured_on_curves(base, curves, goal, lambda: flops, grid, bounded=True)
    assert meter.base is None and set(measured.values()) == {n}
    model = torch.nn.Identity()
    shares = predicted_shares(meter, meter.eval_fn, model, list(TOPS),
                              Planner.for_target(grid, goal), Thresholds(goal, lambda: flops),
                              len(TOPS) * len(grid))
    plan = shares["predicted"]
    assert plan == measured and len(plan) < len(TOPS) * len(grid)
    pilots = 1 + len(TOPS) + 1  # the unpruned model, every top ratio, the stem's lowest
    assert shares["image_share"] * len(plan) * n == pytest.approx(n * len(plan) + 64 * pilots)
    assert shares["handed_on"] == {} and "first 64 images" in shares["pilot"]
    meter.eval_fn.says_seen = False
    assert pilot_seen(meter, model, 250) == (512, None, None)
    assert predicted_shares(meter, meter.eval_fn, model, list(TOPS),
                            Planner.for_target(grid, goal), Thresholds(goal, lambda: flops),
                            len(TOPS) * len(grid)) is None


@pytest.mark.parametrize("target", ["loss=0.05", "flops=0.5"])
def test_on_a_set_too_small_for_a_look_each_pilot_is_its_point_handed_on(target, monkeypatch):
    """32 images or fewer: no look, so no point stops early, and a tenth of the images (YOLOv8n's
    32 val images: one step of 8) says no mAP. Each group's top ratio is then piloted on every
    image and handed on as the point itself (the analysis measures every top ratio first), the
    unpruned metric taken from the analysis's baseline, and no lowest ratio is piloted: the
    plan predicted is the one measured, no image is evaluated for the pilots alone, and the
    analysis does not evaluate those points again."""
    from autoprune.engine import adaptive_play
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_eta import predicted_shares

    monkeypatch.setattr(adaptive_play, "ROUGHNESS", 0.0)
    n, grid = 32, [0.1 * k for k in range(1, 10)]
    curves, flops = _power_curves(), _SquareFlops(TOPS)
    goal = check_target(target)
    meter, measured = _measured_on_curves(torch.ones(n, dtype=torch.float64), curves, goal,
                                          lambda: flops, grid, bounded=True)
    assert not meter.looks and set(measured.values()) == {n}
    metric, evaluated = meter.eval_fn, []
    real = metric.incremental
    monkeypatch.setattr(metric, "incremental",
                        lambda model, start=0: evaluated.append(metric.point) or real(model, start))
    shares = predicted_shares(meter, metric, torch.nn.Identity(), list(TOPS),
                              Planner.for_target(grid, goal), Thresholds(goal, lambda: flops),
                              len(TOPS) * len(grid))
    tops = {(g, 0.9) for g in TOPS}
    assert None not in evaluated and tops <= set(evaluated)  # the unpruned model: not again
    assert shares["predicted"].keys() == measured.keys() and "first 32 images" in shares["pilot"]
    # the top ratios alone: the stem's lowest (it loses 0.8 at the top: piloted on a larger
    # set) would cost a whole point that the loss target's scan stops above
    pilots = shares["pilots"]
    assert pilots.keys() == tops and all(p.seen == n and p.state is None for p in pilots.values())
    assert shares["image_share"] * len(measured) * n == pytest.approx(n * len(measured))
    assert shares["handed_on"] == {key: n for key in tops}
    # the analysis continues from them: each handed-on point is not evaluated again
    run = _curve_run(metric, meter, goal, lambda: flops, list(TOPS), grid)
    run.pilots = dict(pilots)
    evaluated.clear()
    run.run()
    assert set(evaluated) == measured.keys() - tops and not run.pilots
    assert {(g, r) for g, pts in run.record.sensitivities.items() for r in pts} == measured.keys()
    for (g, r), p in pilots.items():
        assert run.record.sensitivities[g][r] == pytest.approx(1.0 - p.low / 0.8)


def _noise_walks_said(monkeypatch, base, offset, scale, **scores):
    """Four phases of eight groups whose loss is ``offset + scale * sin(...)`` at every ratio,
    beside a stem growing as the ratio squared, -50 % FLOPs: the real analysis's points and
    images (measured on scores following the curves, ``scores`` as for
    :func:`_measured_on_curves`), and the points and images the estimate said played smooth
    (ROUGHNESS 0: one play) and rough (the default), each summed over the phases."""
    from autoprune.engine import adaptive_play
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_eta import predicted_shares

    grid, goal = [0.1 * k for k in range(1, 10)], check_target("flops=0.5")
    real = {"points": 0, "images": 0}
    said = {(name, of): 0.0 for name in ("smooth", "rough") for of in ("points", "images")}
    for phase in range(4):
        curves = {"stem": lambda r: 0.3 * (r / 0.9) ** 2,
                  **{f"n{k}": (lambda r, k=k, p=phase:
                               offset + scale * math.sin(37 * k + 101 * r + 7.3 * p))
                     for k in range(8)}}
        flops = _SquareFlops(curves)
        meter, measured = _measured_on_curves(base, curves, goal, lambda: flops, grid,
                                              **scores)
        real["points"] += len(measured)
        real["images"] += sum(measured.values())
        for name, sigma in (("smooth", 0.0), ("rough", adaptive_play.ROUGHNESS)):
            monkeypatch.setattr(adaptive_play, "ROUGHNESS", sigma)
            shares = predicted_shares(
                meter, meter.eval_fn, torch.nn.Identity(), list(curves),
                Planner.for_target(grid, goal), Thresholds(goal, lambda: flops),
                len(curves) * len(grid))
            said[(name, "points")] += shares["points_expected"]
            said[(name, "images")] += sum(shares["predicted"].values())
    return real, said


def test_noise_level_groups_are_predicted_with_their_roughness(monkeypatch):
    """A barely trained model's groups lose nothing but noise (a few images' loss, either sign,
    at every ratio): a FLOPs target's threshold then lies in that noise and the analysis walks
    those groups point by point. Smooth curves through the pilots' top ratios predict a fifth
    fewer points than the real analysis measures (four phases of such noise, -50 % FLOPs); the
    same curves played with each point's roughness (seeded noise but at the top ratio, averaged
    over plays) predict within a tenth of them."""
    base = torch.ones(2000, dtype=torch.float64)
    real, said = _noise_walks_said(monkeypatch, base, 0.0, 0.004, bounded=True)
    real = real["points"]
    said = {name: said[(name, "points")] for name in ("smooth", "rough")}
    assert abs(said["rough"] - real) <= 0.1 * real
    assert real - said["smooth"] >= 0.2 * real


def test_top1_noise_level_groups_are_predicted_with_their_roughness(monkeypatch):
    """Top-1 too: eight groups losing 0-8 images of 2,000 at every ratio (four phases of such
    noise, -50 % FLOPs) walk point by point around a threshold in that noise. The smooth
    curves through their pilots (no flip in 64 images) miss that walk, and the images they
    said were 61 % over the real analysis's; played with each point's roughness (averaged over
    the plays, each look's interval computed once) 29 %."""
    real, said = _noise_walks_said(monkeypatch, _evenly_right(2000, 0.8), 0.002, 0.002,
                                   scores_class=_RateScores)
    real = real["images"]
    said = {name: said[(name, "images")] for name in ("smooth", "rough")}
    assert abs(said["rough"] - real) <= 0.35 * real
    assert said["smooth"] - real >= 0.5 * real


def test_a_look_s_interval_is_computed_once_for_a_whole_play(monkeypatch):
    """The bound's arithmetic is most of a play's time, and a look's counts (images seen, down
    flips) recur across a play's points and rounds: with a memo each is computed once, and
    every answer is the one computed afresh."""
    from autoprune.engine import adaptive_eta
    from autoprune.engine.adaptive_meter import PointMeter

    n = 2000
    meter = PointMeter(None, _evenly_right(n, 0.8), n, 0.8, True, bound="confidence",
                       confidence=0.999, resumable=True, random_order=True)
    calls, real = [], adaptive_eta.mean_interval

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(adaptive_eta, "mean_interval", counting)
    cases = [(loss, ts) for loss in (0.0, 0.001, 0.003, 0.02, 0.05, 0.3)
             for ts in ([0.002], [0.01, 0.02], [0.05])] * 3
    fresh = [adaptive_eta.expected_measure(meter, loss, ts, step=64) for loss, ts in cases]
    computed = len(calls)
    memo = {}
    kept = [adaptive_eta.expected_measure(meter, loss, ts, step=64, memo=memo)
            for loss, ts in cases]
    assert kept == fresh and memo
    assert len(calls) - computed == len(memo) <= computed / 3


def test_a_flops_round_measures_one_point_per_group_planned_as_it_starts():
    """Each round of a FLOPs target gives every group that needs a point exactly the one point
    planned (and stored) as it starts, then estimates the threshold again: resolving a whole
    bracket at one estimate walked noise-level curves down to ratios the final threshold never
    reads. The coarse round probes every group's top ratio."""
    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    base = torch.ones(n, dtype=torch.float64)
    base[::5] = 0.0
    flops, rounds = _SquareFlops(TOPS), []
    _measured_on_curves(base, _power_curves(power=2), check_target("flops=0.5"), lambda: flops,
                        grid, rounds)
    assert len(rounds) >= 3 and rounds[0][0] == {g: 0.9 for g in TOPS}
    for planned, measured in rounds:
        assert measured == list(planned.items())  # one each, the planned one


def test_the_coarse_pass_reads_a_sensitive_top_only_as_over():
    """A FLOPs target's coarse pass decides each group's top ratio against 1 % loss only: a top
    losing 12 %, 30 % or 45 % is over it within its first looks, where the former ladder (2, 5,
    10, 20 and 50 %) spent 1,856, 384 and 1,280 of 2,000 images placing each between two rungs
    no FLOPs threshold reads. A top that loses nothing is still proven within it."""
    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    curves = _power_curves({"stem": 0.8, "a": 0.3, "b": 0.12, "c": 0.04, "d": 0.0, "e": 0.45},
                           power=2)
    flops, rounds = _SquareFlops(curves), []
    _, measured = _measured_on_curves(_evenly_right(n, 0.8), curves, check_target("flops=0.5"),
                                      lambda: flops, grid, rounds, scores_class=_RateScores)
    assert rounds[0][0] == {g: 0.9 for g in curves}
    assert all(measured[(g, 0.9)] <= 384 for g in ("stem", "a", "b", "e"))
    assert measured[("d", 0.9)] > 1000  # a top that loses nothing is proven within it


def test_a_group_that_loses_much_at_every_ratio_is_predicted_from_two_pilot_points():
    """A stem that loses 60 % at every ratio: the power curve through its top ratio would
    expect its loss to cross the 5 % tolerance near 0.33 (points near it, every image);
    the analysis measures all nine points over it, each decided within the first looks. A group
    losing half its metric at the top is piloted at the lowest ratio too, so the plan is the
    measured one; a group below that keeps the curve of :data:`CURVE_POWER`."""
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_curves import CURVE_POWER, curve
    from autoprune.engine.adaptive_eta import predicted_shares

    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    base = torch.ones(n, dtype=torch.float64)
    base[::5] = 0.0
    curves = {"stem": lambda r: 0.6, **_power_curves({"a": 0.3})}
    goal = check_target("loss=0.05")
    meter, measured = _measured_on_curves(base, curves, goal, lambda: None, grid)
    plan = predicted_shares(meter, meter.eval_fn, None, list(curves), Planner(grid, top_down=True),
                            Thresholds(goal, lambda: None), len(curves) * len(grid))["predicted"]
    assert set(plan) == set(measured)
    assert sum(measured.values()) / 1.5 <= sum(plan.values()) <= sum(measured.values()) * 1.5
    assert len([p for p in plan if p[0] == "stem"]) == 9
    assert curve(0.3, 0.9)(0.45) == pytest.approx(0.3 * 0.5 ** CURVE_POWER)  # through the top
    assert curve(0.6, 0.9, 0.05, 0.1)(0.45) == pytest.approx(0.6 * 0.5 ** CURVE_POWER)  # 0.1: noise
    assert curve(0.6, 0.9, 0.5, 0.1)(0.45) > 0.5  # nearly flat


def test_a_group_that_loses_little_until_its_last_ratios_is_piloted_two_ratios_lower():
    """A group losing 0.4 % up to ratio 0.6, then 4 / 10 / 30 % (a trained resnet18's later
    groups): the power curve through its top ratio alone expects its loss to cross the 5 %
    tolerance near 0.44, and a loss target's scan to walk down to there, the points near it on
    every image; the analysis measures 0.9, 0.8 and 0.7. A group losing 5-50 % at its top is
    piloted two ratios lower too, and its curve bends through both pilots (between
    :data:`CURVE_POWER` and :data:`MID_POWER`): the plan is the measured one. Saturated groups
    keep their lowest-ratio pilot; bounded metrics (``pilot_mids`` off) get no second pilot."""
    from autoprune.engine import adaptive_curves
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_curves import CURVE_POWER, MID_POWER, bent_curve, pilot_curves
    from autoprune.engine.adaptive_eta import predicted_shares

    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    base = torch.ones(n, dtype=torch.float64)
    base[::5] = 0.0
    late = {0.7: 0.04, 0.8: 0.1, 0.9: 0.3}
    curves = {"late": lambda r: late.get(round(r, 1), 0.004)}
    goal = check_target("loss=0.05")
    meter, measured = _measured_on_curves(base, curves, goal, lambda: None, grid)

    def plan() -> dict:
        return predicted_shares(meter, meter.eval_fn, None, ["late"],
                                Planner(grid, top_down=True), Thresholds(goal, lambda: None),
                                len(grid))["predicted"]

    assert {round(r, 1) for _, r in measured} == {0.7, 0.8, 0.9}
    assert set(plan()) == set(measured)
    with pytest.MonkeyPatch.context() as mp:  # the top's pilot alone: a walk down to 0.4
        mp.setattr(adaptive_curves, "MID_FROM", 1.0)
        assert min(r for _, r in plan()) < 0.5

    calls = []
    losses = {("late", 0.9): 0.3, ("late", 0.7): 0.04, ("sat", 0.9): 0.6, ("sat", 0.1): 0.55,
              ("small", 0.9): 0.02}

    def loss_at(name, ratio):
        calls.append((name, round(ratio, 1)))
        return losses[(name, round(ratio, 1))]

    bent, lows = pilot_curves(["late", "sat", "small"], Planner(grid), loss_at, pilot_mids=True)
    assert sorted(calls) == [("late", 0.7), ("late", 0.9), ("sat", 0.1), ("sat", 0.9),
                             ("small", 0.9)]
    assert bent["late"](0.9) == pytest.approx(0.3) and bent["late"](0.7) == pytest.approx(0.04)
    assert set(lows) == {"sat"}
    calls.clear()
    pilot_curves(["late", "sat", "small"], Planner(grid), loss_at)  # a bounded metric's
    assert ("late", 0.7) not in calls
    assert bent_curve(0.3, 0.9, 0.0, 0.7)(0.7) == pytest.approx(0.3 * (7 / 9) ** MID_POWER)
    assert bent_curve(0.3, 0.9, 0.29, 0.7)(0.7) == pytest.approx(0.3 * (7 / 9) ** CURVE_POWER)


def test_a_flops_target_bisects_a_saturated_group_s_pilots_where_its_curve_turns(monkeypatch):
    """Two groups that lose little until a step (4 % up to ratio 0.4, then 60 %; 1 % up to 0.8,
    then 75 %: mobilenetv3's conv_stem and blocks.1.0.conv_pw at 32 px) and carry most of the
    FLOPs: one power through their lowest and top pilots reads them as losing tens of % at the
    ratios a -50 % FLOPs threshold takes, and the images said were about half (under 60 %) of
    what the analysis evaluates. Bisected where neighbouring pilots lose 20 % or more apart, their
    curves turn where the steps are, and the images said come within 30 %. Loss targets keep
    the two pilots."""
    from autoprune.engine import adaptive_curves
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_curves import pilot_curves
    from autoprune.engine.adaptive_eta import predicted_shares

    def stepped(low, high, at):
        return lambda r: low if r < at - 1e-9 else high

    grid, goal = [0.1 * k for k in range(1, 10)], check_target("flops=0.5")
    curves = {"stem": stepped(0.04, 0.6, 0.5), "late": stepped(0.01, 0.75, 0.9),
              **_power_curves({"a": 0.3, "b": 0.12, "c": 0.04})}
    flops = _SquareFlops(curves, {"stem": 3.0, "late": 3.0})
    meter, measured = _measured_on_curves(_evenly_right(2000, 0.8), curves, goal,
                                          lambda: flops, grid, scores_class=_RateScores)

    def said() -> float:
        shares = predicted_shares(meter, meter.eval_fn, torch.nn.Identity(), list(curves),
                                  Planner.for_target(grid, goal), Thresholds(goal, lambda: flops),
                                  len(curves) * len(grid))
        assert re.search(r"top ratio on 64 images, \d+ lower ratios of the groups losing 5% or "
                         r"more$", shares["pilot"])  # what the ETA's line says it was read from
        return sum(shares["predicted"].values())

    real = sum(measured.values())
    assert abs(said() - real) <= 0.3 * real
    monkeypatch.setattr(adaptive_curves, "STEP_PILOTS", 0)  # the lowest and top pilots alone
    assert said() < 0.6 * real

    monkeypatch.setattr(adaptive_curves, "STEP_PILOTS", 3)
    calls = []

    def loss_at(name, ratio):
        calls.append(round(ratio, 1))
        return curves[name](ratio)

    pieced, _ = pilot_curves(["stem"], Planner(grid), loss_at, pilot_mids=True,
                             pilot_steps=True)
    assert calls == [0.9, 0.1, 0.5, 0.3, 0.4]  # the widest gap halved, three times
    assert pieced["stem"](0.4) == pytest.approx(0.04) and pieced["stem"](0.5) == \
        pytest.approx(0.6)
    calls.clear()
    pilot_curves(["stem"], Planner(grid), loss_at, pilot_mids=True)  # a loss target's
    assert calls == [0.9, 0.1]


def test_the_pilot_reads_its_loss_over_the_images_it_evaluated():
    """The pilot evaluates whole steps (64 images here, for a first look of 32): its loss, the
    images its unpruned model gets right (what half a flip is added against) and the images the
    ETA charges for it are all of those 64. One flip among 64 right images is 1.5 / 65 = 2.3 %
    smoothed, under a 2.5 % tolerance (the top ratio is within: one point); read against the
    first 32 images' right ones, as before, it was 3 % and the plan walked down the ratios."""
    from autoprune.engine.adaptive import Thresholds
    from autoprune.engine.adaptive_eta import (PILOT_IMAGES, expected_loss, pilot_loss,
                                               predicted_shares)
    from autoprune.engine.adaptive_meter import PointMeter

    n, grid = 2000, [0.1 * k for k in range(1, 10)]
    base = (torch.arange(n) % 5 != 4).double()
    base[:64] = 1.0
    scores = _CurveScores(base, {"g": lambda r: 1.5 / float(base.sum())})  # one flip: image 0
    meter = PointMeter(scores, base, n, 0.8, True, bound="confidence", confidence=0.999,
                       resumable=True, random_order=True)
    with scores.pruned("g", 0.9):
        pilot = pilot_loss(meter, None)
    assert pilot.seen == 64 > PILOT_IMAGES and pilot.right == 64.0 and pilot.binary
    assert pilot.loss == pytest.approx(1 / 64)
    assert expected_loss(pilot.counts) == pytest.approx(1.5 / 65)  # no wrong image: no up
    shares = predicted_shares(meter, scores, None, ["g"], Planner(grid, top_down=True),
                              Thresholds(check_target("loss=0.025"), lambda: None), len(grid))
    plan = shares["predicted"]
    assert list(plan) == [("g", 0.9)]
    # the pilot's 64 images are handed on to the analysis's measurement of the same point
    assert shares["image_share"] * n == pytest.approx(max(plan[("g", 0.9)], 64))
    assert shares["pilots"][("g", 0.9)].before()["counts"]["seen"] == 64


def test_a_pilot_that_flips_nothing_either_way_expects_about_no_loss():
    """A point's loss is net of its up flips: the pilot's expected loss is the down flips' rate
    less the up flips' (each with half a flip), so 64 images with no flip either way expect
    about nothing (half a flip down alone read 0.009, and a FLOPs target's play walked such
    groups down the ratios), and up flips can cancel down flips."""
    from autoprune.engine.adaptive_eta import expected_loss

    nothing = PairedCounts(seen=64, score=55.0, down=0, up=0, seen1=55, seen0=9)
    assert expected_loss(nothing) == pytest.approx(0.5 / 56 - 0.5 / 10 * 9 / 55)
    assert expected_loss(nothing) < 0.001 < 0.5 / 56
    lossy = PairedCounts(seen=64, score=50.0, down=5, up=0, seen1=55, seen0=9)
    assert expected_loss(lossy) == pytest.approx(5.5 / 56 - 0.5 / 10 * 9 / 55)
    both = PairedCounts(seen=64, score=57.0, down=2, up=4, seen1=55, seen0=9)
    assert expected_loss(both) == 0.0  # 2 of 55 down, 4 of 9 up: more up than down
    assert expected_loss(PairedCounts(seen=4, score=0.0, seen0=4)) == 0.0  # none right


def test_a_pilot_s_images_are_handed_on_to_the_analysis_not_evaluated_again(toy_task, tmp_path,
                                                                           monkeypatch):
    """The estimate's pilot evaluates each group's top ratio on its first step (64 images);
    the analysis, which measures that point too, continues from the pilot's counts (looking at
    them first, as it would have after that step): the same table and intervals, 64 images a
    group fewer."""
    from autoprune.engine import adaptive_analysis
    model, x, y = toy_task
    real, pilots = adaptive_analysis.predicted_shares, []

    def shares(*args, handed=True, **kwargs):
        out = real(*args, **kwargs)
        pilots.append(dict(out["pilots"]))  # the run pops them as it hands them on
        return out if handed else {**out, "pilots": {}}

    records = {}
    for handed in (True, False):
        monkeypatch.setattr(adaptive_analysis, "predicted_shares",
                            lambda *a, handed=handed, **k: shares(*a, handed=handed, **k))
        path = tmp_path / f"handed-{handed}.json"
        table = autoprune.sensitivity(model, x[:1], Top1(x, y), ratios=RATIOS,
                                      sensitivities_file=path, progress=True,
                                      options={"adaptive": True, "target": {"loss": 0.05}})
        records[handed] = (table, read_record(path))
    (table, handed), (again, alone) = records[True], records[False]
    assert table == again and handed.intervals == alone.intervals
    assert handed.extra["evaluation"]["decided_early"] == \
        alone.extra["evaluation"]["decided_early"]
    saved = alone.extra["evaluation"]["images_evaluated"] - \
        handed.extra["evaluation"]["images_evaluated"]
    # every group's top ratio, and the lowest of those that lose much there, all measured
    assert pilots[0].keys() == pilots[1].keys() and len(pilots[0]) > len(table)
    assert all(p.seen == 64 for p in pilots[0].values())
    assert saved == 64 * len(pilots[0])


def test_the_eta_costs_each_predicted_point_at_its_own_share_of_the_model():
    """A loss target measures the top ratios, which compute less than the unpruned model: the
    ETA charges the predicted points their own MACs share, not the grid's average."""
    from autoprune.engine.cost import Estimate

    share_of = {("g", 0.1): 1.0, ("g", 0.3): 1.0, ("g", 0.7): 0.2, ("g", 0.9): 0.2}
    adaptive = {"points_share": 0.5, "image_share": 1.0,
                "predicted": {("g", 0.9): 100, ("g", 0.7): 50}}
    est = Estimate(4, 100, 0.01, list(share_of.values()), 0.5, adaptive, 0.0, share_of)
    assert est.seconds == pytest.approx(150 * 0.01 * 0.2 + 2 * 0.5)
    est.adaptive = {k: v for k, v in adaptive.items() if k != "predicted"}  # no prediction:
    assert est.seconds == pytest.approx(2 * 100 * 0.01 * 0.6 + 2 * 0.5)  # the grid's average
    # a pilot's images are evaluated before the ETA is said: only the rest is to come; and
    # the bound's arithmetic is charged at each look
    est.adaptive = {**adaptive, "handed_on": {("g", 0.9): 64}, "looks": 7, "look_seconds": 0.1}
    assert est.seconds == pytest.approx((36 + 50) * 0.01 * 0.2 + 2 * 0.5 + 0.7)


def test_the_seconds_per_image_are_the_median_of_the_timed_steps(monkeypatch):
    """The ETA's seconds per image: each step after the first (which warms up) timed on its
    own and the median taken, so that one step slowed by another process does not set it; the
    timing stops after ``max_steps`` or ``min_seconds``, and the steps are closed."""
    from autoprune.engine import cost

    clock = iter([0.0, 0.8, 1.6, 9.6, 10.4, 11.2, 12.0, 99.0])  # the third step: 8 s
    monkeypatch.setattr(cost, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    closed = []

    def steps():
        try:
            while True:
                yield Step(images=8, scores=torch.ones(8))
        finally:
            closed.append(True)

    # five timed steps: 0.1 s an image (0.8 s for 8) but one; the mean would be 0.28
    assert cost.time_steps(steps(), min_seconds=1e9, max_steps=5) == pytest.approx(0.1)
    assert closed == [True]
    clock = iter([0.0, 0.4, 0.9, 50.0])  # stops once min_seconds passed: two steps timed
    assert cost.time_steps(steps(), min_seconds=0.6) == pytest.approx((0.4 / 8 + 0.5 / 8) / 2)
    clock = iter([0.0])
    assert cost.time_steps(iter([Step(images=8, scores=torch.ones(8))])) is None


def test_the_eta_counts_the_looks_at_which_the_bound_is_computed():
    """The meter computes a point's interval at each evaluation step that passes a look (several
    looks in one step: once), not at the last image (the point is then exact), and once at a
    pilot's handed-on counts when they are past a look."""
    from autoprune.engine.adaptive_eta import bound_looks
    from autoprune.engine.bounds import look_points

    looks = look_points(1000)  # 32, 48, 72, 108, 162, 243, 365, 547, 820
    assert bound_looks(looks, 0, 64, 64, 1000) == 1  # 32 and 48 in the first step
    assert bound_looks(looks, 0, 128, 64, 1000) == 2  # then 72 and 108
    assert bound_looks(looks, 64, 128, 64, 1000) == 2  # the pilot's counts, then 128
    assert bound_looks(looks, 0, 1000, 64, 1000) == 7  # 64 128 192 256 384 576 832, not 1000
    assert bound_looks(looks, 0, 0, 64, 1000) == 0


def test_the_expected_share_of_a_point_s_images_falls_with_a_larger_set():
    """The confidence bound decides a point after a count of images that grows more slowly than
    the validation set (resnet18's loss target: 0.60 of a point's 1,000 images, 0.22 of 10,000):
    the estimate's share falls as (1,000 / images) ** (1/3) above 1,000 images; at or below, and
    without an early stop (detection: no bound), it is the share measured at 1,000."""
    from autoprune.engine.cost import adaptive_shares

    small, at_1k = (adaptive_shares("loss", "confidence", 9, n)["image_share"] for n in (64, 1000))
    at_10k = adaptive_shares("loss", "confidence", 9, 10_000)["image_share"]
    assert small == at_1k == adaptive_shares("loss", "confidence", 9)["image_share"]
    assert at_10k == pytest.approx(at_1k * 10 ** (-1 / 3))
    assert adaptive_shares("loss", "none", 9, 10_000)["image_share"] == 1.0
    assert adaptive_shares("flops", "confidence", 9, 10_000)["points_share"] == \
        adaptive_shares("flops", "confidence", 9, 1000)["points_share"]  # points: the grid's


def test_bad_adaptive_settings_are_one_line_errors(toy_task):
    model, x, y = toy_task
    for options, match in [({"adaptive": True, "early_stop": 0.5}, "early_stop"),
                           ({"adaptive": True, "target": {"speed": 0.5}}, "target"),
                           ({"adaptive": True, "target": "flops=2"}, "flops"),
                           ({"bound": "loose"}, "bound"), ({"confidence": 1.0}, "confidence"),
                           ({"adaptive": "yes"}, "adaptive")]:
        with pytest.raises(ConfigError, match=match) as e:
            _run(model, x, Top1(x, y), **options)
        assert_one_line(e)
    assert check_target("latency=0.4").to_json() == {"latency": 0.4}
    assert check_target({"pruned_flops": 0.5}).kind == "flops"


def test_classification_flow_measures_top1_image_by_image(toy_task, tmp_path):
    model, x, y = toy_task
    data = TensorDataset(x, y)
    path = tmp_path / "s.json"
    from autoprune import classification as cls
    table = cls.analyze_sensitivity(model, data, path, ratios=RATIOS, progress=False,
                                    input_size=16, num_classes=10, device="cpu",
                                    sensitivity_options={"adaptive": True,
                                                         "target": {"loss": 0.05}})
    record = read_record(path)
    assert record.extra["evaluation"]["mode"] == "adaptive"
    assert record.intervals and record.extra["adaptive"]["bound_used"] == "confidence"
    assert record.extra["evaluation"]["images_evaluated"] < 25 * len(x)
    assert set(table) == set(record.sensitivities)


def _segmentation_stub(eval_set, batch_size):
    """What :class:`BoundedMIoU` reads of a segmentation adapter, over ``eval_set`` (images,
    masks of classes 0-2) in batches of ``batch_size``."""

    class Stub:
        num_workers, device, ignore_index, _eval_batches = 0, "cpu", 255, None

        def metric_classes(self, model):
            return 3, ["a", "b", "c"]

    stub = Stub()
    stub.eval_set, stub.batch_size = eval_set, batch_size
    return stub


def test_the_miou_bound_holds_for_every_completion_and_ends_exact():
    from autoprune.engine.adaptive_meter import PointMeter
    from autoprune.engine.adaptive_pilot import BoundedPilot
    from autoprune.engine.points import relative_loss
    from autoprune.tasks.segmentation.incremental import BoundedMIoU, miou_bounds
    from autoprune.tasks.segmentation.metrics import confusion_matrix, evaluate_iou

    g = torch.Generator().manual_seed(0)
    for _ in range(50):  # a seen part, then any predictions on the unseen pixels
        truth = torch.randint(0, 4, (2, 60), generator=g)
        pred = torch.where(torch.rand(2, 60, generator=g) < 0.6, truth,
                           torch.randint(0, 4, (2, 60), generator=g))
        seen = confusion_matrix(pred[0], truth[0], 4, None)
        low, high = miou_bounds(seen, torch.bincount(truth[1], minlength=4))
        final = confusion_matrix(pred.flatten(), truth.flatten(), 4, None)
        assert low - 1e-12 <= _miou(final) <= high + 1e-12

    eval_set = TensorDataset(torch.randn(10, 3, 8, 8, generator=g),
                             torch.randint(0, 3, (10, 8, 8), generator=g))
    model = torch.nn.Conv2d(3, 3, 1).eval()
    steps = list(BoundedMIoU(_segmentation_stub(eval_set, 4)).incremental(model))
    exact = evaluate_iou(model, torch.utils.data.DataLoader(eval_set, batch_size=4),
                         device=torch.device("cpu"), num_classes=3, class_keys=["a", "b", "c"])
    assert [s.images for s in steps] == [4, 4, 2]
    assert steps[-1].low == steps[-1].high == steps[-1].value == pytest.approx(exact["miou"])
    assert all(s.low <= exact["miou"] + 1e-12 <= s.high + 2e-12 for s in steps)
    # each step also says the mIoU of the images seen so far (what the ETA's pilot reads)
    for k, step in enumerate(steps):
        seen = torch.utils.data.Subset(eval_set, range(sum(s.images for s in steps[:k + 1])))
        assert step.seen == pytest.approx(evaluate_iou(
            model, torch.utils.data.DataLoader(seen, batch_size=4), device=torch.device("cpu"),
            num_classes=3, class_keys=["a", "b", "c"])["miou"])
    # continued after a step from its state (how a pilot is handed on): the same steps after it
    evaluation = BoundedMIoU(_segmentation_stub(eval_set, 4))
    again = list(evaluation.incremental(model, start=4, state=steps[0].state))
    assert [(s.images, s.low, s.high, s.value) for s in again] == \
        [(s.images, s.low, s.high, s.value) for s in steps[1:]]
    assert torch.equal(again[-1].state, steps[-1].state)
    for start, state in ((4, None), (4, steps[0].state.tolist()), (4, torch.zeros(4, 4).long()),
                         (6, steps[0].state)):
        with pytest.raises(ValueError, match="state|batch boundary"):
            list(evaluation.incremental(model, start=start, state=state))
    # the meter continues such a pilot as it would have gone on after its step
    meter = PointMeter(evaluation, None, 10, 0.9, True, bound="exact", confidence=0.999,
                       resumable=True, random_order=False)
    first = BoundedPilot(4, steps[0].low, steps[0].high, steps[0].state)
    for thresholds in ([0.05], [0.99]):
        assert meter.measure(model, thresholds, first.before()) == meter.measure(model, thresholds)
    whole = BoundedPilot(10, steps[-1].low, steps[-1].high, steps[-1].state)
    assert meter.measure(None, [0.05], whole.before()) == \
        {"loss": relative_loss(0.9, steps[-1].value, True)}  # nothing evaluated: no model


def test_a_bounded_miou_pilot_is_handed_on_to_the_analysis_not_evaluated_again(monkeypatch,
                                                                              tmp_path):
    """mIoU's evaluation continues from a step's confusion matrix (its ``state``): the analysis
    measures each group's top ratio from where the estimate's pilot of it stopped (looking at
    its sure bounds first, as it would have after that step): the same table and intervals as
    without the pilots, each pilot's images fewer."""
    import functools

    from autoprune.engine import adaptive_analysis, cost
    from autoprune.tasks.segmentation.incremental import BoundedMIoU

    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 3, 12, 12, generator=g)
    masks = torch.einsum("nchw,kc->nkhw", x, torch.randn(3, 3, generator=g)).argmax(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.Conv2d(16, 3, 1))
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), 2e-2)
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(model(x), masks)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()

    class MIoU:
        random_order, resumable, images = False, True, len(x)

        def __init__(self):
            self.incremental = BoundedMIoU(_segmentation_stub(TensorDataset(x, masks), 8)
                                           ).incremental

        def __call__(self, model):
            return list(self.incremental(model))[-1].value

    monkeypatch.setattr(cost, "time_steps", functools.partial(cost.time_steps, min_seconds=1e9))
    real, pilots, runs = adaptive_analysis.predicted_shares, [], {}
    for handed in (True, False):
        def shares(*args, handed=handed, **kwargs):
            out = real(*args, **kwargs)
            pilots.append(dict(out["pilots"]))  # the run pops them as it hands them on
            return out if handed else {**out, "pilots": {}}

        monkeypatch.setattr(adaptive_analysis, "predicted_shares", shares)
        path = tmp_path / f"handed-{handed}.json"
        table = autoprune.sensitivity(model, x[:1], MIoU(), ratios=RATIOS, progress=True,
                                      ignored_layers=[model[6]], sensitivities_file=path,
                                      options={"adaptive": True, "target": {"loss": 0.05}})
        runs[handed] = (table, read_record(path))
    (table, handed), (again, alone) = runs[True], runs[False]
    assert table == again and handed.intervals == alone.intervals
    assert pilots[0].keys() == pilots[1].keys() and len(pilots[0]) >= len(table)
    assert all(p.seen == 16 and p.state.shape == (3, 3) for p in pilots[0].values())
    saved = alone.extra["evaluation"]["images_evaluated"] - \
        handed.extra["evaluation"]["images_evaluated"]
    assert saved == 16 * len(pilots[0])
    # a running state is handed on in memory only: one in a file (a stranger's) is not read
    data = json.loads((tmp_path / "handed-True.json").read_text())
    next(iter(next(iter(data["intervals"].values())).values()))["state"] = [[1, 2], [3, 4]]
    (tmp_path / "stranger.json").write_text(json.dumps(data))
    stranger = read_record(tmp_path / "stranger.json")
    assert stranger.intervals == handed.intervals


def _miou(conf):
    """mIoU of a confusion matrix (classes neither present nor predicted left out)."""
    from autoprune.tasks.segmentation.metrics import iou_from_confusion
    iou = iou_from_confusion(conf)
    return float(iou[~torch.isnan(iou)].mean())


@needs_fmnist
def test_the_one_call_flow_measures_for_its_own_target_and_a_plan_prunes_nothing(tmp_path):
    """train(..., pruned_flops=0.4, sensitivity_options={"adaptive": True}) measures the points a
    FLOPs target needs (the run's target reaches the analysis); with plan=True it prints the
    cost and stops before pruning."""
    from autoprune import classification as cls

    small = dict(epochs=1, pretrain_epochs=1, batch_size=32, input_size=32, train_limit=64,
                 eval_limit=40, progress=False, warmup_epochs=0, ratios=(0.3, 0.6))
    torch.manual_seed(0)
    planned = cls.train(ToyNet(10), "fashion-mnist", save_dir=tmp_path / "plan",
                        sensitivities_file=tmp_path / "plan.json", pruned_flops=0.4,
                        sensitivity_options={"adaptive": True, "plan": True}, **small)
    assert planned.report is None and not (tmp_path / "plan" / "pruned").exists()
    torch.manual_seed(0)
    done = cls.train(ToyNet(10), "fashion-mnist", save_dir=tmp_path / "run",
                     sensitivities_file=tmp_path / "s.json", pruned_flops=0.4,
                     sensitivity_options={"adaptive": True}, **small)
    assert done.report is not None
    record = read_record(tmp_path / "s.json")
    assert record.extra["adaptive"]["target"] == {"flops": 0.4}
    # the report says how the table it pruned with was measured
    evaluated = record.extra["evaluation"]["images_evaluated"]
    assert done.report["sensitivity_analysis"]["adaptive_target"] == {"flops": 0.4}
    assert done.report["sensitivity_analysis"]["images_evaluated"] == evaluated > 0
    assert f"Sensitivity analysis: adaptive, for flops=0.4, {evaluated:,} images evaluated" in \
        (tmp_path / "run" / "report.md").read_text()


def test_a_full_analysis_times_warm_batches_where_the_evaluation_reports_as_it_goes(
        toy_task, capsys):
    """The estimate said before a full analysis: seconds per image timed on a few warm batches
    of the evaluation's incremental steps where it has them (the whole pass it would read
    otherwise is the prefix cache's recording or the folded check's: YOLOv8n's took 2.4x a
    point's), on one whole evaluation where it has not; the line says which."""
    model, x, y = toy_task

    class Plain:  # the same metric without the incremental protocol
        images = len(x)

        def __call__(self, m):
            return Top1(x, y)(m)

    said = {}
    for name, eval_fn in (("steps", Top1(x, y)), ("plain", Plain())):
        autoprune.sensitivity(model, x[:1], eval_fn, ratios=RATIOS, progress=True,
                              options={"plan": True})
        said[name] = capsys.readouterr().out
    assert "ms/image here (timed on a few batches)" in said["steps"]
    assert "ms/image here (timed on one whole evaluation)" in said["plain"]


def test_a_long_full_analysis_says_how_to_measure_less():
    """A full analysis expected to take half an hour or more names the adaptive analysis and how
    to ask for it (API and CLI) after its ETA; a shorter one, or an adaptive one, does not."""
    from autoprune.engine.cost import ADAPTIVE_HINT, LONG_ANALYSIS_S, Estimate

    def full(seconds_per_image):
        return Estimate(10, 1000, seconds_per_image, [1.0] * 10, 0.0, None, 0.0, {})

    long, short = full(LONG_ANALYSIS_S / 10_000), full(LONG_ANALYSIS_S / 10_000 / 2)
    assert long.full_seconds == pytest.approx(LONG_ANALYSIS_S)
    head, hint = long.describe().split("\n")
    assert "ETA 30" in head and hint == ADAPTIVE_HINT
    assert "{'adaptive': True} in train()" in hint and "--adaptive --target" in hint
    assert "\n" not in short.describe() and "adaptive" not in short.describe()
    long.adaptive = {"points_share": 0.5, "image_share": 0.5, "target": "eval_metric_loss 0.05",
                     "bound": "confidence"}
    assert ADAPTIVE_HINT not in long.describe()
