"""The sensitivity file: round trip, merge, damaged files, PaddleSlim pickle import."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import autoprune as ap
from conftest import assert_one_line

TABLE = {"conv1": {0.1: 0.01, 0.3: 0.05, 0.5: 0.2},
         "layer1.0.conv1": {0.1: -0.002, 0.5: 0.125}}


def test_save_load_round_trip(tmp_path):
    path = tmp_path / "sub" / "s.json"  # parent folders are created
    ap.save_sensitivities(TABLE, path, arch="resnet18", fingerprint="abc123", metric_name="top1",
                          baseline=0.9, higher_is_better=True, criterion="fpgm", note="hello")
    assert ap.load_sensitivities(path) == TABLE
    record = ap.read_record(path)
    assert record.sensitivities == TABLE
    assert record.model["arch"] == "resnet18" and record.model["fingerprint"] == "abc123"
    assert record.metric == {"name": "top1", "baseline": 0.9, "higher_is_better": True}
    assert record.criterion == "fpgm"
    assert record.extra == {"note": "hello"}
    data = json.loads(path.read_text())
    assert data["sensitivities"]["conv1"] == {"0.10": 0.01, "0.30": 0.05, "0.50": 0.2}
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]


def test_save_rounds_ratio_keys_and_accepts_string_keys(tmp_path):
    path = tmp_path / "s.json"
    ap.save_sensitivities({"g": {"0.1": 0.5, 0.2999999: 0.7}}, path)
    assert ap.load_sensitivities(path) == {"g": {0.1: 0.5, 0.3: 0.7}}


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "s.json"
    ap.save_sensitivities(TABLE, path)
    ap.save_sensitivities({"other": {0.5: 0.1}}, path)
    assert ap.load_sensitivities(path) == {"other": {0.5: 0.1}}
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_merge_dicts_union_later_wins():
    a = {"g1": {0.1: 0.01, 0.2: 0.02}, "g2": {0.5: 0.5}}
    b = {"g1": {0.2: 0.9, 0.3: 0.03}, "g3": {0.1: 0.1}}
    merged = ap.merge_sensitivities([a, b])
    assert merged == {"g1": {0.1: 0.01, 0.2: 0.9, 0.3: 0.03}, "g2": {0.5: 0.5}, "g3": {0.1: 0.1}}
    assert list(merged["g1"]) == [0.1, 0.2, 0.3]
    assert ap.merge_sensitivities([b, a])["g1"][0.2] == 0.02
    assert a == {"g1": {0.1: 0.01, 0.2: 0.02}, "g2": {0.5: 0.5}}, "inputs must not be modified"


def test_merge_paths_and_mixed(tmp_path):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    ap.save_sensitivities({"g1": {0.1: 0.01, 0.2: 0.02}}, pa, fingerprint="fp")
    ap.save_sensitivities({"g1": {0.2: 0.5}, "g2": {0.3: 0.3}}, pb, fingerprint="fp")
    assert ap.merge_sensitivities([pa, pb]) == {"g1": {0.1: 0.01, 0.2: 0.5}, "g2": {0.3: 0.3}}
    assert ap.merge_sensitivities([str(pb), pa]) == {"g1": {0.1: 0.01, 0.2: 0.02},
                                                     "g2": {0.3: 0.3}}
    assert ap.merge_sensitivities([pa, {"g1": {0.1: 7.0}}]) == {"g1": {0.1: 7.0, 0.2: 0.02}}


def test_merge_refuses_files_of_different_models(tmp_path):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    ap.save_sensitivities({"g1": {0.1: 0.01}}, pa, fingerprint="aaaa")
    ap.save_sensitivities({"g1": {0.2: 0.5}}, pb, fingerprint="bbbb")
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.merge_sensitivities([pa, pb])
    assert_one_line(info)


def _valid_json(tmp_path):
    path = tmp_path / "valid.json"
    ap.save_sensitivities(TABLE, path, arch="resnet18", fingerprint="abc")
    return path.read_text()


BAD_FILES = {
    "truncated": lambda ok: ok[: len(ok) // 2],
    "empty": lambda ok: "",
    "garbage text": lambda ok: "this is not json {",
    "json list": lambda ok: "[1, 2, 3]",
    "no format field": lambda ok: json.dumps({"sensitivities": {"g": {"0.1": 0.1}}}),
    "wrong format": lambda ok: ok.replace("autoprune-sensitivity", "something-else"),
    "future version": lambda ok: ok.replace('"version": 1', '"version": 99'),
    "sensitivities is a list": lambda ok: json.dumps(
        {**json.loads(ok), "sensitivities": [1, 2]}),
    "group is a number": lambda ok: json.dumps({**json.loads(ok), "sensitivities": {"g": 3}}),
    "non-numeric loss": lambda ok: json.dumps(
        {**json.loads(ok), "sensitivities": {"g": {"0.10": "high"}}}),
    "non-numeric ratio": lambda ok: json.dumps(
        {**json.loads(ok), "sensitivities": {"g": {"half": 0.1}}}),
    "ratio out of range": lambda ok: json.dumps(
        {**json.loads(ok), "sensitivities": {"g": {"1.50": 0.1}}}),
    "NaN loss": lambda ok: json.dumps(
        {**json.loads(ok), "sensitivities": {"g": {"0.10": float("nan")}}}),
    "model is a string": lambda ok: json.dumps({**json.loads(ok), "model": "resnet18"}),
    "criterion is a number": lambda ok: json.dumps({**json.loads(ok), "criterion": 3}),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_damaged_files_are_one_line_errors(tmp_path, kind):
    path = tmp_path / "bad.json"
    path.write_text(BAD_FILES[kind](_valid_json(tmp_path)))
    for reader in (ap.load_sensitivities, ap.read_record, lambda p: ap.merge_sensitivities([p])):
        with pytest.raises(ap.SensitivityFileError) as info:
            reader(path)
        assert_one_line(info)


@pytest.mark.parametrize("content", [
    pickle.dumps({"conv2d_1.w_0": {0.1: 0.01}}),      # a PaddleSlim pickle given as JSON
    bytes(range(256)) * 4,                             # arbitrary binary
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
])
def test_binary_files_are_one_line_errors(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.load_sensitivities(path)
    assert_one_line(info)


def test_missing_file_is_a_one_line_error(tmp_path):
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.load_sensitivities(tmp_path / "nope.json")
    assert_one_line(info)
    with pytest.raises(ap.SensitivityFileError):
        ap.load_sensitivities(tmp_path)  # a folder


# ---- PaddleSlim import --------------------------------------------------------------------------

PADDLE = {"conv2d_1.w_0": {0.1: 0.01, 0.2: 0.035, 0.3: 0.12},
          "conv2d_2.w_0": {0.1: 0.0, 0.2: 0.002}}


def _pickle(tmp_path, obj, protocol=pickle.DEFAULT_PROTOCOL, name="sens.pickle"):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


def test_paddleslim_import_needs_opt_in(tmp_path):
    path = _pickle(tmp_path, PADDLE)
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.import_paddleslim(path)
    assert "allow_pickle" in assert_one_line(info)


@pytest.mark.filterwarnings("ignore:reading pickle file")
@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_paddleslim_import_reads_plain_pickle(tmp_path, protocol):
    path = _pickle(tmp_path, PADDLE, protocol)
    assert ap.import_paddleslim(path, allow_pickle=True) == PADDLE


@pytest.mark.filterwarnings("ignore:reading pickle file")
@pytest.mark.parametrize("protocol", [0, 2])
def test_paddleslim_import_reads_old_protocol_plain_pickle(tmp_path, protocol):
    path = _pickle(tmp_path, PADDLE, protocol)
    assert ap.import_paddleslim(path, allow_pickle=True) == PADDLE


@pytest.mark.filterwarnings("ignore:reading pickle file")
@pytest.mark.parametrize("protocol", [3, 4])
def test_paddleslim_import_reads_numpy_keys(tmp_path, protocol):
    # PaddleSlim builds its ratios with np.arange, so keys are numpy floats
    data = {"conv2d_1.w_0": {np.float64(r): np.float64(l) for r, l in
                             zip(np.arange(0.1, 0.4, 0.1), [0.01, 0.035, 0.12])},
            "conv2d_2.w_0": {np.float32(0.1): np.float32(0.0), np.float32(0.2): 0.002}}
    path = _pickle(tmp_path, data, protocol)
    got = ap.import_paddleslim(path, allow_pickle=True)
    assert set(got) == set(PADDLE)
    for g in PADDLE:
        assert list(got[g]) == list(PADDLE[g])
        for r in PADDLE[g]:
            assert got[g][r] == pytest.approx(PADDLE[g][r], abs=1e-7)
        assert all(type(k) is float for k in got[g])


@pytest.mark.filterwarnings("ignore:reading pickle file")
def test_paddleslim_import_numpy_keys_protocol2(tmp_path):
    data = {"conv2d_1.w_0": {np.float64(0.1): 0.01, np.float64(0.2): 0.05}}
    path = _pickle(tmp_path, data, 2)
    assert ap.import_paddleslim(path, allow_pickle=True) == {"conv2d_1.w_0": {0.1: 0.01, 0.2: 0.05}}


@pytest.mark.filterwarnings("ignore:reading pickle file")
def test_paddleslim_import_renames_and_round_trips(tmp_path):
    path = _pickle(tmp_path, PADDLE)
    sens = ap.import_paddleslim(path, allow_pickle=True, name_map={"conv2d_1.w_0": "conv1"})
    assert sens == {"conv1": PADDLE["conv2d_1.w_0"], "conv2d_2.w_0": PADDLE["conv2d_2.w_0"]}
    out = tmp_path / "converted.json"
    ap.save_sensitivities(sens, out)
    assert ap.load_sensitivities(out) == sens


class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


@pytest.mark.filterwarnings("ignore:reading pickle file")
@pytest.mark.parametrize("protocol", [2, 4])
def test_paddleslim_import_refuses_code_and_does_not_run_it(tmp_path, protocol):
    marker = tmp_path / "PWNED"
    payload = {"conv2d_1.w_0": {0.1: _Evil(f"touch {marker}")}}
    path = _pickle(tmp_path, payload, protocol)
    assert b"system" in path.read_bytes()
    for kwargs in ({}, {"allow_pickle": True}):
        with pytest.raises(ap.SensitivityFileError) as info:
            ap.import_paddleslim(path, **kwargs)
        assert_one_line(info)
        assert not marker.exists(), "the pickle's code was executed"
    with pytest.raises(ap.SensitivityFileError):
        ap.load_sensitivities(path)  # the JSON reader never unpickles either
    assert not marker.exists()
    # sanity: the payload is live (loading it with plain pickle would run the command)
    pickle.loads(path.read_bytes())
    assert marker.exists()


@pytest.mark.filterwarnings("ignore:reading pickle file")
@pytest.mark.parametrize("obj", [[1, 2, 3], {"g": [0.1, 0.2]}, {"g": {0.1: "x"}},
                                 {"g": {1.5: 0.1}}, np.arange(3)])
def test_paddleslim_import_refuses_wrong_content(tmp_path, obj):
    path = _pickle(tmp_path, obj)
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.import_paddleslim(path, allow_pickle=True)
    assert_one_line(info)


@pytest.mark.filterwarnings("ignore:reading pickle file")
def test_paddleslim_import_refuses_truncated_and_missing(tmp_path):
    path = _pickle(tmp_path, PADDLE)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ap.SensitivityFileError) as info:
        ap.import_paddleslim(path, allow_pickle=True)
    assert_one_line(info)
    with pytest.raises(ap.SensitivityFileError):
        ap.import_paddleslim(tmp_path / "missing.pickle", allow_pickle=True)


# ---- shard files of a distributed run ------------------------------------------------------------

def test_shards_and_temp_files_of_a_name_with_brackets_are_found(tmp_path):
    from autoprune.engine.files import remove_stale_temp_files
    from autoprune.engine.store import SensitivityRecord, absorb_shards, shard_path, write_record

    path = tmp_path / "sens[1].json"  # glob would read [1] as a character class
    shard = SensitivityRecord()
    shard.set_point("g", 0.5, 0.25)
    write_record(shard, shard_path(path, 1))
    stale = tmp_path / ".sens[1].json.x1y2.tmp"
    stale.write_text("{")
    remove_stale_temp_files(path)
    assert not stale.exists()
    record = SensitivityRecord()
    assert absorb_shards(record, path) == [shard_path(path, 1)]
    assert record.sensitivities == {"g": {0.5: 0.25}}


def test_absorb_shards_checks_every_shard_before_merging_any(tmp_path):
    from autoprune.engine.store import SensitivityRecord, absorb_shards, shard_path, write_record

    path = tmp_path / "s.json"
    for rank, group in ((1, "a"), (2, "b")):
        shard = SensitivityRecord(criterion="l1_norm" if rank == 1 else "fpgm")
        shard.set_point(group, 0.5, 0.1)
        write_record(shard, shard_path(path, rank))
    seen = []

    def check(shard_file, shard):
        seen.append(shard_file.name)
        if shard.criterion != "l1_norm":
            raise ap.SensitivityFileError(f"{shard_file} differs")

    record = SensitivityRecord()
    with pytest.raises(ap.SensitivityFileError):
        absorb_shards(record, path, check)
    assert seen == ["s.json.rank1.json", "s.json.rank2.json"]
    assert record.sensitivities == {}  # the good shard was not merged either
    assert shard_path(path, 1).exists() and shard_path(path, 2).exists()
