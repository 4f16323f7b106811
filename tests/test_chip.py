import dataclasses
import json

import pytest

from lgopt.errors import LgoptError
from lgopt.hw.chip import PRESETS, SOURCES, get_chip, parse_set, parse_size, source_of, validate


def test_presets_valid_and_sourced():
    assert set(PRESETS) >= {"bm1684x", "bm1688", "bm1684", "bm1690", "sg2380", "cv184x", "cv181x"}
    for name, chip in PRESETS.items():
        validate(chip)
        for field in ("npu_num", "eu_bytes", "lmem_bytes", "lmem_banks", "tiu_mhz", "gdma_gbps", "macs_per_lane"):
            assert source_of(name, field), (name, field)


def test_reference_constants():
    c = PRESETS["bm1684x"]
    assert (c.npu_num, c.eu_bytes, c.lmem_bytes, c.lmem_banks, c.ic_parallel) == (64, 64, 256 * 1024, 16, 64)
    assert c.bank_bytes == 16 * 1024
    c = PRESETS["bm1688"]
    assert (c.npu_num, c.eu_bytes, c.lmem_bytes, c.bank_bytes) == (32, 16, 128 * 1024, 8 * 1024)
    assert PRESETS["bm1684"].align_4n and PRESETS["bm1684"].lmem_bytes == 512 * 1024
    c = PRESETS["cv181x"]
    assert (c.npu_num, c.lmem_bytes, c.lmem_banks) == (8, 32 * 1024, 8)


def test_overrides_and_sizes():
    c = get_chip("bm1684x", parse_set(["lmem_bytes=64K", "npu_num=16", "macs_per_lane.f16=64"]))
    assert (c.lmem_bytes, c.npu_num, c.macs_per_lane["f16"]) == (65536, 16, 64)
    assert parse_size("1M") == 1 << 20 and parse_size("512") == 512


@pytest.mark.parametrize("sets,msg", [
    (["npu_num=0"], "npu_num must be at least 1"),
    (["lmem_banks=3"], "does not divide"),
    (["lmem_bytes=16"], "smaller than one aligned row"),
    (["eu_bytes=48"], "power of two"),
    (["bogus=1"], "unknown chip parameter"),
    (["lmem_bytes=lots"], "bad size"),
    (["align_4n=maybe"], "true or false"),
])
def test_impossible_values_rejected(sets, msg):
    with pytest.raises(LgoptError, match=msg):
        get_chip("bm1684x", parse_set(sets))


def test_unknown_chip_and_bad_set():
    with pytest.raises(LgoptError, match="unknown chip"):
        get_chip("tpu9000")
    with pytest.raises(LgoptError, match="key=value"):
        parse_set(["lmem_bytes"])


def test_chip_file_toml_and_json(tmp_path):
    t = tmp_path / "c.toml"
    t.write_text('base = "cv181x"\nlmem_bytes = "64K"\nnpu_num = 16\n')
    c = get_chip(chip_file=t)
    assert (c.name, c.lmem_bytes, c.npu_num) == ("cv181x", 65536, 16)
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"base": "bm1688", "lmem_banks": 8}))
    assert get_chip(chip_file=j).lmem_banks == 8
    bad = tmp_path / "bad.toml"
    bad.write_text("lmem_bytes = = 3")
    with pytest.raises(LgoptError, match="not valid TOML"):
        get_chip(chip_file=bad)
    with pytest.raises(LgoptError, match="lmem_banks"):
        get_chip("bm1684x", {"lmem_banks": 5}, chip_file=None)


def test_every_source_key_names_a_field():
    fields = {f.name for f in dataclasses.fields(PRESETS["bm1684x"])}
    for key in SOURCES:
        chip, field = key.split(".", 1)
        assert field in fields and (chip == "*" or chip in PRESETS), key
