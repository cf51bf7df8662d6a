"""dynatree_viz.views.race: runs of the same prompt as a race over target forwards or time."""

from __future__ import annotations

import copy

import pytest

import dynatree_viz as dv
from dynatree_core.policy.config import ARConfig
from dynatree_core.records.trace import IterationRecord, Trace
from dynatree_core.policy.tree import DraftTree
from dynatree_viz.core import style
from dynatree_viz.views.race import CURVE, FINISH, HEAD, TEXT
from helpers.viz import VOCAB, tiny_trace


def _ar_of(tr: Trace, step_s: float = 0.02) -> Trace:
    """The AR run of ``tr``'s output: one record per token, one target forward each."""
    recs, root = [], tr.prompt_tokens[-1]
    for k, tok in enumerate(tr.tokens):
        tree = DraftTree.with_root(root)
        tree.stop_reasons[0] = "d_max"
        recs.append(IterationRecord(index=k, prefix_len=len(tr.prompt_tokens) - 1 + k, tree=tree,
                                    target_argmax=[tok], accepted_path=[], committed=[tok],
                                    bonus=tok, token_texts=[VOCAB.get(root, "?")],
                                    committed_texts=[VOCAB[tok]],
                                    timings={"draft": 0.0, "verify": step_s, "commit": 0.0},
                                    target_forwards=1))
        root = tok
    return Trace(method="ar", config=ARConfig().to_dict(), target_name=tr.target_name,
                 draft_name=None, prompt_tokens=list(tr.prompt_tokens),
                 prompt_text=tr.prompt_text, iterations=recs, tokens=list(tr.tokens),
                 text=tr.text)


def _demo_pair(n: int = 40):
    return (dv.synthetic.synthetic_trace(4 * n, config=ARConfig(), max_new_tokens=n),
            dv.synthetic.synthetic_trace(n, max_new_tokens=n))


def _lane(fig_or_frame, label: str, what: str):
    (t,) = [t for t in fig_or_frame.data if t.name == f"{label} {what}"]
    return t


def test_lanes_end_at_each_traces_totals_and_the_caption_ratio_matches():
    ar, dt = _demo_pair()
    assert ar.tokens == dt.tokens  # the same greedy output
    for x in ("forwards", "time"):
        fig = dv.race({"ar": ar, "dynatree": dt}, x=x)
        last = fig.frames[-1]
        ends = {}
        for label, tr in (("ar", ar), ("dynatree", dt)):
            m = tr.metrics
            total = (m["target_forwards"] if x == "forwards" else
                     m["prefill_time_s"] + sum(sum(r.timings.values()) for r in tr.iterations))
            curve = _lane(last, label, CURVE)
            assert curve.x[-1] == pytest.approx(total) and curve.y[-1] == len(tr.tokens)
            assert list(curve.y) == sorted(curve.y)  # tokens only ever grow
            fin = _lane(last, label, FINISH)
            assert (fin.x[0], fin.y[0]) == (pytest.approx(total), len(tr.tokens))
            if x == "time":  # the demo's wall time is exactly prefill + iterations
                assert total == pytest.approx(m["wall_time_s"])
            ends[label] = total
        ratio = ends["ar"] / ends["dynatree"]
        meta = fig.layout.meta["race"]
        assert meta["ratios"]["dynatree"] == pytest.approx(ratio)
        assert meta["lanes"]["ar"] == {"tokens": len(ar.tokens), "end": pytest.approx(ends["ar"])}
        assert f"{ratio:.2f}×" in fig.layout.title.text
        assert f"{len(dt.tokens)} tokens" in fig.layout.title.text
    assert ratio > 1  # the demo's DynaTree is faster than its AR


def test_hand_built_race_numbers():
    dt = tiny_trace(3)  # 3 iterations x 4 tokens, one target forward each, no metrics
    ar = _ar_of(dt)
    fwd = dv.race_data([ar, dt], x="forwards")
    assert [ln.label for ln in fwd.lanes] == ["ar", "dynatree"] and fwd.baseline == "ar"
    assert [ln.end for ln in fwd.lanes] == [12.0, 3.0]
    assert fwd.ratios["dynatree"] == pytest.approx(4.0)
    assert "dynatree: 4.00× fewer target forwards than ar" in fwd.caption
    tim = dv.race_data([ar, dt], x="time")
    dt_time = sum(0.01 * (i + 1) + 0.03 + 0.001 for i in range(3))
    assert tim.lanes[1].end == pytest.approx(dt_time)
    assert tim.ratios["dynatree"] == pytest.approx(12 * 0.02 / dt_time)
    assert f"{12 * 0.02 / dt_time:.2f}× the speed of ar (faster)" in tim.caption
    # a slower lane is called slower, with the same ratio
    slow = dv.race_data({"dynatree": dt, "ar": _ar_of(dt, step_s=0.001)}, x="time")
    r = 12 * 0.001 / dt_time
    assert slow.ratios["dynatree"] == pytest.approx(r) and f"{r:.2f}× the speed of ar (slower)" in slow.caption


def test_every_frame_shows_each_lane_up_to_its_x():
    dt = tiny_trace(3)
    ar = _ar_of(dt)
    fig = dv.race({"AR": ar, "DynaTree": dt})
    xs = [float(f.name.split("#")[0]) for f in fig.frames]
    assert xs == sorted(xs) and xs[0] == 0 and xs[-1] == 12
    # one frame per distinct event x: 0 and after every AR token / DynaTree iteration
    assert xs == [float(k) for k in range(13)]
    slider = fig.layout.sliders[0]
    assert [s.args[0][0] for s in slider.steps] == [f.name for f in fig.frames]
    for t, fr in zip(xs, fig.frames):
        for label, tr, per in (("AR", ar, 1), ("DynaTree", dt, 4)):
            curve = _lane(fr, label, CURVE)
            assert max(curve.x) <= t + 1e-9
            done = min(int(t), len(tr.iterations))  # iterations finished by x = t
            assert curve.y[-1] == per * done
            head = _lane(fr, label, HEAD)
            assert head.y[0] == per * done and head.x[0] == min(t, len(tr.iterations))
            finished = t >= len(tr.iterations)
            assert bool(list(_lane(fr, label, FINISH).x)) == finished
            text = _lane(fr, label, TEXT).text[0]
            shown = "".join(VOCAB[tok] for tok in tr.tokens[: per * done])
            assert text.strip() == shown.strip()
    (menu,) = fig.layout.updatemenus
    assert "play" in menu.buttons[0].label and menu.buttons[0].method == "animate"


def test_finish_star_stands_clear_of_the_count_and_the_text():
    fig = dv.race({"AR": _ar_of(tiny_trace(3)), "DynaTree": tiny_trace(3)})
    y_top = fig.layout.yaxis.range[1]
    star_px = 18  # the star marker's size
    lane_px = (fig.layout.yaxis.domain[1] - fig.layout.yaxis.domain[0]) * (
        fig.layout.height - fig.layout.margin.t - fig.layout.margin.b)
    for label in ("AR", "DynaTree"):
        star = _lane(fig.frames[-1], label, FINISH)
        assert star.text[0].startswith("finish: ")
        assert _lane(fig.frames[-1], label, HEAD).text[0] == ""  # no second count on the star
        assert _lane(fig.frames[0], label, HEAD).text[0] == "0"  # ... while it runs, the count
        text = _lane(fig.frames[-1], label, TEXT)
        # the text hangs below its point: one 11 px line, clear of the star's top half
        gap_px = (text.y[0] - star.y[0]) / y_top * lane_px
        assert gap_px >= 11 * 1.3 + star_px / 2 + 11, (label, gap_px)


def test_lane_colours_are_the_method_colours():
    ar, dt = _demo_pair(10)
    fig = dv.race([ar, dt])
    assert _lane(fig, "ar", CURVE).line.color == style.METHOD_COLORS["ar"]
    assert _lane(fig, "dynatree", CURVE).line.color == style.METHOD_COLORS["dynatree"]
    labels = [ln.label for ln in dv.race_data([dt, copy.deepcopy(dt)]).lanes]
    assert labels == ["dynatree", "dynatree (2)"]
    colours = [ln.color for ln in dv.race_data([dt, copy.deepcopy(dt)]).lanes]
    assert len(set(colours)) == 2


def test_different_lengths_are_compared_per_token_and_said():
    dt = tiny_trace(3)
    ar = _ar_of(tiny_trace(2))  # 8 tokens
    d = dv.race_data([ar, dt])
    assert d.ratios["dynatree"] == pytest.approx((8 / 8) / (3 / 12))
    assert any("different numbers of tokens" in n for n in d.notes)
    fig = dv.race([ar, dt])
    assert "different numbers of tokens" in fig.layout.title.text


def test_bad_input_is_named():
    dt = tiny_trace(2)
    other = tiny_trace(2)
    other.prompt_tokens, other.prompt_text = [8, 3], "a dog"
    with pytest.raises(ValueError, match="same prompt.*'a cat on the'.*'a dog'"):
        dv.race({"x": dt, "y": other})
    with pytest.raises(ValueError, match="x must be one of 'forwards', 'time'; got 'tokens'"):
        dv.race([dt, _ar_of(dt)], x="tokens")
    with pytest.raises(ValueError, match="at least one trace"):
        dv.race([])
    with pytest.raises(ValueError, match="baseline must be one of"):
        dv.race([dt, _ar_of(dt)], baseline="linear")
    no_time = copy.deepcopy(dt)
    for r in no_time.iterations:
        r.timings = {}
    with pytest.raises(ValueError, match="no timings"):
        dv.race([no_time], x="time")
