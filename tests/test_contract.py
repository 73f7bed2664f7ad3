"""The message contract, function by function (no broker needed)."""

import json

import pytest

from tickets import contract


def test_encode_is_canonical_json_with_a_version():
    body = contract.encode(registration_id=2, name="Zoë")
    assert body == '{"id":"R-0002","name":"Zoë","v":1}'.encode()
    assert contract.decode(body) == contract.Message(registration_id=2, name="Zoë")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"id":"R-0002","name":"A"}', "missing: v"),
        (b'{"id":"R-0002","name":"A","v":1,"vip":true}', "unknown: vip"),
        (b'{"id":"R-0002","name":"A","v":2}', "Unsupported message version 2"),
        (b'{"id":2,"name":"A","v":1}', "The id must be a string"),
        (b'{"id":"R-2","name":"A","v":1}', "is not a registration ID"),
        (b'{"id":"R-00002","name":"A","v":1}', "is not a registration ID"),
        (b'{"id":"R-0000","name":"A","v":1}', "is not a registration ID"),
        (b'{"id":"R-0002","name":"","v":1}', "Please enter the guest name"),
        (b'{"id":"R-0002","name":" A","v":1}', "not in its stored form"),
        (b'{"id":"R-0002","name":"A\\nB","v":1}', "control characters"),
        (json.dumps({"id": "R-0002", "name": "x" * 101, "v": 1}).encode(), "at most 100 characters"),
        (b'{"id":"R-0002","name":"' + b"x" * 5000 + b'","v":1}', "the limit is 4096"),
    ],
)
def test_decode_refuses_with_a_reason(body, reason):
    with pytest.raises(contract.ContractError, match=reason):
        contract.decode(body)


def test_codes_round_trip_and_only_the_canonical_spelling_parses():
    assert contract.format_code(7) == "R-0007"
    assert contract.format_code(12345) == "R-12345"
    assert contract.parse_code("R-12345") == 12345
    for bad in ("R-7", "r-0007", "R-0007x", "", "R-00007"):
        with pytest.raises(contract.ContractError):
            contract.parse_code(bad)
