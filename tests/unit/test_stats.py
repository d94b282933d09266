"""studies/stats.py: against hand computations, against rliable (the reference implementation of Agarwal et
al. 2021), and the bootstrap intervals' coverage on data whose truth is known."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rlfoundry.studies import stats

# Two tasks, four runs each. Worked by hand:
#   mean   = mean of the task means = (2.5 + 25) / 2 = 13.75
#   pooled = [1, 2, 3, 4, 10, 20, 30, 40]
#   median = (4 + 10) / 2 = 7            (rliable's aggregate_median, the median of the task means, is 13.75)
#   IQM    = 8 scores, cut int(0.25 * 8) = 2 at each end: mean(3, 4, 10, 20) = 37 / 4 = 9.25
SCORES = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])


def test_point_estimates_by_hand():
    assert stats.mean(SCORES) == pytest.approx(13.75)
    assert stats.median(SCORES) == pytest.approx(7.0)
    assert stats.iqm(SCORES) == pytest.approx(9.25)
    assert stats.median_of_means(SCORES) == pytest.approx(13.75)  # the median of the two task means 2.5 and 25


def test_optimality_gap_by_hand():
    # Normalised scores: the shortfalls below 1 are 0.5, 0 (1.2 is clipped to 1), 0 and 0.2: mean 0.7 / 4 = 0.175.
    # Below gamma = 0.9: 0.4, 0, 0, 0.1: 0.125.
    normalised = np.array([[0.5, 1.2], [1.0, 0.8]])
    assert stats.optimality_gap(normalised) == pytest.approx(0.175)
    assert stats.optimality_gap(normalised, gamma=0.9) == pytest.approx(0.125)
    assert stats.optimality_gap(np.full((3, 2), 1.5)) == 0.0


def test_the_optimality_gap_is_estimated_on_normalised_scores_only():
    scores = np.random.default_rng(0).normal(1.0, 0.3, size=(6, 2))
    assert set(stats.interval_estimates(scores)) == {"mean", "median", "iqm", "median_of_means"}
    estimates = stats.interval_estimates(scores, normalised=True)
    gap = estimates["optimality_gap"]
    assert gap.value == stats.optimality_gap(scores) and gap.low < gap.value < gap.high
    assert estimates["mean"] == stats.interval_estimates(scores)["mean"]  # the same resamples either way


def test_probability_of_improvement_by_hand():
    # Task 0: x = [1, 3, 5] against y = [2, 3]: of the 6 pairs x wins (3,2) (5,2) (5,3), ties (3,3) and loses
    # (1,2) (1,3): (3 + 0.5) / 6 = 7/12. Task 1: all scores equal, every pair a tie: 1/2.
    # Averaged over the tasks: (7/12 + 6/12) / 2 = 13/24.
    x = np.array([[1.0, 0.0], [3.0, 0.0], [5.0, 0.0]])
    y = np.array([[2.0, 0.0], [3.0, 0.0]])
    assert stats.probability_of_improvement(x, y).value == pytest.approx(13 / 24)
    assert stats.probability_of_improvement(y, x).value == pytest.approx(11 / 24)  # ties split, so P(X>Y)+P(Y>X)=1


def test_performance_profile_by_hand():
    # tau = 2.5: task 0 has 2 of 4 runs above, task 1 all 4: (0.5 + 1) / 2 = 0.75.
    # tau = 25: task 0 none, task 1 two of four: (0 + 0.5) / 2 = 0.25. tau = 40: no run is above (strictly).
    fractions, low, high = stats.performance_profile(SCORES, [2.5, 25.0, 40.0])
    np.testing.assert_allclose(fractions, [0.75, 0.25, 0.0])
    assert np.all(low <= fractions) and np.all(fractions <= high)


def test_intervals_contain_the_point_and_are_deterministic():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(10, 2))
    first = stats.interval_estimates(scores, seed=3)
    assert first == stats.interval_estimates(scores, seed=3)
    assert first != stats.interval_estimates(scores, seed=4)
    for estimate in first.values():
        assert estimate.low <= estimate.value <= estimate.high
        assert estimate.low < estimate.high


def test_a_single_run_has_its_point_as_interval():
    single = np.array([[3.0, 5.0]])
    for estimate in stats.interval_estimates(single).values():
        assert estimate.low == estimate.value == estimate.high
    p = stats.probability_of_improvement(single, np.array([[2.0, 2.0]]))  # one run a side
    assert p.low == p.value == p.high == 1.0
    fractions, low, high = stats.performance_profile(single, [4.0])
    assert fractions[0] == low[0] == high[0] == 0.5


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_scores_are_refused(bad):
    scores = np.ones((4, 1))
    scores[2, 0] = bad
    with pytest.raises(ValueError, match="not finite"):
        stats.interval_estimates(scores)
    with pytest.raises(ValueError, match="y: 1 of 4 scores are not finite"):
        stats.probability_of_improvement(np.ones((3, 1)), scores)


def test_wrong_shapes_are_refused():
    with pytest.raises(ValueError, match=r"\[runs, tasks\]"):
        stats.interval_estimates(np.ones(5))
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement(np.ones((3, 2)), np.ones((3, 1)))


# ---------------------------------------------------------------- against rliable


@pytest.fixture(scope="module")
def rliable():
    """rliable.library and rliable.metrics (the dev extra installs rliable; its arch needs pandas < 3, pinned)."""
    import rliable.library
    import rliable.metrics

    return types.SimpleNamespace(library=rliable.library, metrics=rliable.metrics)


@pytest.fixture(scope="module")
def runs():
    """3 tasks × 10 runs on different scales, and a second method with 8 runs."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(10, 3)) * np.array([1.0, 2.0, 0.5]) + np.array([0.0, 1.0, 3.0])
    y = rng.normal(size=(8, 3)) + 0.5
    return x, y


# Two bootstraps with different random streams. An interval end's Monte Carlo standard deviation, measured over
# 30 seeds on data like these, is at most 2% of the interval's width with 2,000 resamples (mean, IQM and P(X > Y);
# the median's ends jump between neighbouring order statistics), so about 1.3% with 5,000. Our 5,000 against
# rliable's 5,000 differ with an SD of about 1.8% of the width, against rliable's 2,000 for P(X > Y) (its
# bootstrap calls mannwhitneyu once per resample and task: 10,000 take half a minute) about 2.2%: 10% of the
# width allows 4.5 SDs or more, while a real difference in the resampling (pooling the tasks instead of
# stratifying them, another percentile rule) moves the ends by far more.
REPS = 5_000
RLIABLE_IMPROVEMENT_REPS = 2_000
TOLERANCE = 0.10


def _close(ours: tuple[float, float], theirs: np.ndarray) -> None:
    width = ours[1] - ours[0]
    np.testing.assert_allclose(ours, np.ravel(theirs), atol=TOLERANCE * width)


def test_point_estimates_equal_rliables(rliable, runs):
    x, y = runs
    assert stats.mean(x) == pytest.approx(rliable.metrics.aggregate_mean(x), rel=1e-12)
    assert stats.iqm(x) == pytest.approx(rliable.metrics.aggregate_iqm(x), rel=1e-12)
    assert stats.probability_of_improvement(x, y).value == pytest.approx(
        rliable.metrics.probability_of_improvement(x, y), rel=1e-12)
    assert stats.probability_of_improvement(x, x).value == pytest.approx(0.5)


def test_median_of_means_and_optimality_gap_equal_rliables_to_the_last_digit(rliable, runs):
    x, y = runs
    for scores in (x, y, x[:, :1], np.abs(x) / 2):
        assert stats.median_of_means(scores) == rliable.metrics.aggregate_median(scores)
        for gamma in (1.0, 0.5, 2.0):
            assert stats.optimality_gap(scores, gamma) == rliable.metrics.aggregate_optimality_gap(scores, gamma)


def test_intervals_match_rliables(rliable, runs):
    x, _ = runs
    ours = stats.interval_estimates(x, reps=REPS, seed=1, normalised=True)
    for name, estimator in {**stats.ESTIMATORS, **stats.NORMALISED_ESTIMATORS}.items():
        np.random.seed(2)  # rliable's StratifiedBootstrap draws from numpy's global generator
        points, intervals = rliable.library.get_interval_estimates(
            {"x": x}, lambda s, f=estimator: np.array([f(s)]), reps=REPS)
        assert ours[name].value == pytest.approx(points["x"][0])
        _close((ours[name].low, ours[name].high), intervals["x"])


def test_probability_of_improvement_interval_matches_rliables(rliable, runs):
    x, y = runs
    ours = stats.probability_of_improvement(x, y, reps=REPS, seed=1)
    np.random.seed(2)
    _, intervals = rliable.library.get_interval_estimates(
        {"xy": [x, y]}, lambda a, b: np.array([rliable.metrics.probability_of_improvement(a, b)]),
        reps=RLIABLE_IMPROVEMENT_REPS)
    _close((ours.low, ours.high), intervals["xy"])


@pytest.mark.parametrize("single_x", [True, False])
def test_one_run_against_many_resamples_the_many_as_rliable_does(rliable, single_x):
    """1 run against 10: the single run resamples to itself, the 10 do not, so the interval is wide ([0.3, 0.9]
    here), not the point (which read as certainty)."""
    one, many = np.array([[5.0]]), np.random.default_rng(0).normal(5.0, 1.0, size=(10, 1))
    x, y = (one, many) if single_x else (many, one)
    ours = stats.probability_of_improvement(x, y, reps=REPS, seed=1)
    np.random.seed(2)
    _, intervals = rliable.library.get_interval_estimates(
        {"xy": [x, y]}, lambda a, b: np.array([rliable.metrics.probability_of_improvement(a, b)]),
        reps=RLIABLE_IMPROVEMENT_REPS)
    assert ours.high - ours.low >= 0.5
    _close((ours.low, ours.high), intervals["xy"])


def test_performance_profile_matches_rliables(rliable, runs):
    x, _ = runs
    taus = np.linspace(-1.0, 4.0, 11)
    fractions, low, high = stats.performance_profile(x, taus, reps=REPS, seed=1)
    np.random.seed(2)
    profiles, bands = rliable.library.create_performance_profile({"x": x}, taus, reps=REPS)
    np.testing.assert_allclose(fractions, profiles["x"])
    # Fractions move in steps of 1/30 (30 runs): the ends agree to within one step.
    np.testing.assert_allclose(low, bands["x"][0], atol=1 / 30 + 1e-9)
    np.testing.assert_allclose(high, bands["x"][1], atol=1 / 30 + 1e-9)


# ---------------------------------------------------------------- coverage


def _exponential_iqm() -> float:
    """The IQM of Exp(1): its mean between the quartiles a = ln(4/3) and b = ln 4, 2 * integral of x e^-x over
    [a, b] = 2 [(a + 1) e^-a - (b + 1) e^-b], about 0.738."""
    a, b = np.log(4 / 3), np.log(4)
    return 2 * ((a + 1) * np.exp(-a) - (b + 1) * np.exp(-b))


@pytest.mark.parametrize("name, truth", [("normal", 0.0), ("exponential", _exponential_iqm())])
def test_iqm_intervals_cover_the_truth(name, truth):
    """400 experiments of 10 runs each, drawn at once and bootstrapped in one vectorised call (a curve's points
    are independent experiments to curve_estimates; that they share resample indices leaves each one an
    ordinary bootstrap). Measured over 20,000 experiments, the 95% percentile
    interval of the IQM of 10 runs covers the truth 93.5% of the time for both distributions (the percentile
    bootstrap under-covers with few runs); with 400 experiments the binomial SD is 1.2 points, so [89%, 98%] is
    about 3.5 SD either way, and an interval twice too narrow or too wide falls far outside it."""
    rng = np.random.default_rng(11)
    draws = rng.normal(size=(10, 1, 400)) if name == "normal" else rng.exponential(size=(10, 1, 400))
    _, low, high = stats.curve_estimates(draws, seed=5)
    coverage = np.mean((low <= truth) & (truth <= high))
    assert 0.89 <= coverage <= 0.98, coverage


# ---------------------------------------------------------------- curves


def test_on_grid_takes_the_latest_evaluation_at_or_before_each_step():
    grid = [0, 100, 150, 200, 250, 1000]
    read = stats.on_grid([100, 200, 300], [1.0, 2.0, 3.0], grid)
    np.testing.assert_array_equal(read, [np.nan, 1.0, 1.0, 2.0, 2.0, 3.0])
    assert np.isnan(stats.on_grid([], [], grid)).all()
    with pytest.raises(ValueError, match="ascending"):
        stats.on_grid([200, 100], [1.0, 2.0], grid)


def test_unaligned_runs_on_a_common_grid():
    grid = stats.common_grid([1000, 1200, 900], points=4)
    np.testing.assert_allclose(grid, [0, 300, 600, 900])  # up to the shortest run, so all of them cover it
    a = stats.on_grid([250, 500, 750, 1000], [1, 2, 3, 4], grid)
    b = stats.on_grid([300, 600, 900, 1200], [10, 20, 30, 40], grid)
    np.testing.assert_array_equal(a, [np.nan, 1, 2, 3])
    np.testing.assert_array_equal(b, [np.nan, 10, 20, 30])


def test_curve_points_without_every_run_are_nan():
    curves = np.arange(24, dtype=float).reshape(4, 2, 3)
    curves[1, 0, 0] = np.nan  # one run had not evaluated yet at the first point
    value, low, high = stats.curve_estimates(curves)
    assert np.isnan([value[0], low[0], high[0]]).all()
    assert np.isfinite(value[1:]).all() and np.all(low[1:] <= value[1:]) and np.all(value[1:] <= high[1:])
    assert np.isnan(stats.curve_estimates(np.full((3, 1, 2), np.nan))[0]).all()


def test_curve_intervals_equal_the_final_score_intervals_at_each_point():
    """The vectorised bootstrap over points is the same bootstrap as interval_estimates' at each point."""
    curves = np.random.default_rng(3).normal(size=(6, 2, 5))
    value, low, high = stats.curve_estimates(curves, seed=9)
    for point in range(5):
        iqm = stats.interval_estimates(curves[:, :, point], seed=9)["iqm"]
        np.testing.assert_allclose([value[point], low[point], high[point]], [iqm.value, iqm.low, iqm.high])


def test_a_single_run_curve_is_its_own_band():
    value, low, high = stats.curve_estimates(np.array([[[1.0, 2.0]]]))
    np.testing.assert_array_equal(value, [1.0, 2.0])
    np.testing.assert_array_equal(low, value)
    np.testing.assert_array_equal(high, value)
