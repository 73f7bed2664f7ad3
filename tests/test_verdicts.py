"""verify_handler's child process hands its verdicts to the parent as data
(classroom/verdicts.py), not as printed lines to parse. Fast: a file, no
subprocess (tests/test_lab.py and the guides run the real pair)."""

import pytest

from classroom import verdicts
from classroom.lab import graded
from classroom.verdicts import Verdict

pytestmark = pytest.mark.fast


def test_verdicts_written_are_read_back_each_once_in_order(tmp_path):
    path = tmp_path / "verdicts.jsonl"
    path.touch()
    reader = verdicts.Reader(path)
    first = Verdict("normal run", True, "one delivery, one ticket, acked")
    second = Verdict(
        "two registrations with the same name", False, '2 tickets for R-0004: ünïcode, "quotes"\nand a newline'
    )
    verdicts.write(path, first)
    assert reader.new() == [first]
    assert reader.new() == []
    verdicts.write(path, second)
    with open(path, "a") as file:
        file.write('{"name": "half writ')  # the child is still writing this one
    assert reader.new() == [second]
    assert reader.new() == []


def test_a_failed_scenario_is_graded_with_what_to_look_at_and_printed_as_before():
    scenario = Verdict("interrupted before the write", False, "the delivery was acked before the ticket was written")
    assert graded(scenario).line() == (
        "FAIL  handler, interrupted before the write: the delivery was acked before the ticket was written; "
        "look at where handle() calls ack(): it must come after the transaction commits."
    )
    assert graded(Verdict("normal run", True, "one delivery")).line() == "PASS  handler, normal run: one delivery"
