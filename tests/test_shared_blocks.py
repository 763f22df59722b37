
from tests import shared_blocks


def test_every_copy_matches_its_source():
    problems = shared_blocks.check()
    assert not problems, "\n".join(problems)


def test_core_blocks_are_used():
    names = {b.name for b in shared_blocks.all_blocks()}
    assert {"common-args", "run-setup", "gae"} <= names


def test_a_drifted_copy_is_caught_and_rewritten(tmp_path):
    (tmp_path / "cleanrl").mkdir()
    src = "x = 1\n# [shared:blk] source: cleanrl/a.py\ndef f():\n    return 1\n# [/shared:blk]\n"
    copy = "# [shared:blk] source: cleanrl/a.py\ndef f():\n    return 2\n# [/shared:blk]\ny = 2\n"
    (tmp_path / "cleanrl" / "a.py").write_text(src)
    (tmp_path / "cleanrl" / "b.py").write_text(copy)
    problems = shared_blocks.check(tmp_path)
    assert len(problems) == 1 and "b.py" in problems[0] and "differs" in problems[0]
    shared_blocks.write(tmp_path)
    assert shared_blocks.check(tmp_path) == []
    assert (tmp_path / "cleanrl" / "b.py").read_text().endswith("    return 1\n# [/shared:blk]\ny = 2\n")
