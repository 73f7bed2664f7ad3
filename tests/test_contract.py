"""The message contract, function by function (no broker needed)."""

import json
import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickets import contract

pytestmark = pytest.mark.fast


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


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 2000 + b"]" * 2000, "could not be read as JSON"),
        (b'{"id":"R-0002","id":"R-0003","name":"A","v":1}', "repeats a key"),
        (b'{"id":"R-0002","name":"A","v":NaN}', "NaN is not a JSON number"),
        (b'{"id":"R-0002","name":"A","v":' + b"9" * 5000 + b"}", "the limit is 4096"),
        (b'{"id":"R-0002","name":"A","v":' + b"9" * 4000 + b"}", "a 4000-digit number"),
        (b'{"id":"R-0002","name":"A","v":' + b"9" * 100 + b"}", "a 100-digit number"),
        (b'{"id":"R-0002","name":"\\ud800","v":1}', "control characters"),
    ],
)
def test_decode_is_total_on_hostile_bodies(body, reason):
    with pytest.raises(contract.ContractError, match=reason):
        contract.decode(body)


def test_claimed_id_never_raises():
    assert contract.claimed_id(b'{"id":"R-0042","name":"\\ud800"}') == 42
    for body in (b"[" * 3000, b"\xff", b'{"id":"R-42"}', b"[]", b'{"id":' + b"[" * 2000 + b"}"):
        assert contract.claimed_id(body) is None


@pytest.mark.parametrize(
    "value",
    [b"a\x00b", "a\x00b", "\ud800 lone", b"\xed\xa0\x80", b"\xff" * 100, "é" * 50, ("\U0001f600" * 3000)],
)
def test_storable_text_has_no_nul_no_surrogate_and_fits(value):
    text = contract.storable_text(value, max_bytes=200)
    assert "\x00" not in text
    assert len(text.encode("utf-8")) <= 200  # encodes: no lone surrogate left


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("\u200b", "invisible formatting characters"),
        ("\ufeff", "invisible formatting characters"),
        ("Mina\u00adPatel", "invisible formatting characters"),
        ("\u3164", "visible letter or digit"),
        ("\u2800", "visible letter or digit"),
        ("\u0301", "visible letter or digit"),
        ("\u3164\u3164 \u2800", "visible letter or digit"),
        ("\u202eletaP aniM", "text-direction control characters"),
        ("Mina\u2066Patel", "text-direction control characters"),
        ("Mina\u200fPatel", "text-direction control characters"),
        ("-- !!", "visible letter or digit"),
        ("\u0958" * 101, "at most 100 characters (this one has 101)"),
        ("a" + "\u0301" * 400, "at most 100 characters"),
    ],
)
def test_names_without_a_visible_letter_or_with_hidden_controls_are_refused(name, reason):
    with pytest.raises(contract.ContractError, match=re.escape(reason)):
        contract.clean_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "\u0958" * 60,
        "e\u0301" * 100,
        "क्षत्रिय",
        "محمد\u200cعلی",
        "👩\u200d🔬 Ada",
        "李小龍",
        "O'Brien-Smith",
        "R2D2",
        "7",
    ],
)
def test_names_count_characters_as_typed_and_keep_joiners(name):
    stored = contract.clean_name(name)
    assert contract.name_length(stored) <= contract.MAX_NAME_LENGTH
    assert len(stored) <= contract.MAX_NAME_CODE_POINTS


@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=120) | st.text(max_size=120))
@settings(max_examples=500, deadline=None)
def test_the_quick_path_for_plain_names_agrees_with_the_general_rules(value):
    def outcome(function):
        try:
            return function(value)
        except contract.ContractError as error:
            return f"refused: {error}"

    assert outcome(contract.clean_name) == outcome(contract.checked_name)


ID_TEXT = st.integers(min_value=0, max_value=10**13).map(contract.format_code) | st.text(max_size=16)
BODY_SHAPED = st.builds(
    lambda code, name, v: ('{"id":"' + code + '","name":"' + name + '","v":' + v + "}").encode(
        "utf-8", "surrogatepass"
    ),
    ID_TEXT,
    st.text(max_size=120) | st.text(alphabet='"\\\x00\x1f\x7f \u2028aé', max_size=8),
    st.sampled_from(["1", "2", "0", "1.0", "true", "01", " 1", "1 "]),
)


@given(BODY_SHAPED | st.binary(max_size=200))
@settings(max_examples=1000, deadline=None)
def test_the_quick_path_for_canonical_bodies_agrees_with_the_json_parser(body):
    """A body shaped as encode() writes it skips the JSON parser; for any
    bytes, that must give what the parser would: the same Message or the
    same refusal."""

    def outcome():
        try:
            return contract.decode(body)
        except contract.ContractError as error:
            return f"refused: {error}"

    quick = outcome()
    with mock.patch.object(contract, "CANONICAL_BODY", re.compile(r"(?!)")):  # matches nothing
        assert outcome() == quick


@given(st.integers(min_value=1, max_value=10**12 - 1), st.text(min_size=1, max_size=120))
@settings(max_examples=300, deadline=None)
def test_what_encode_writes_decodes_to_the_same_message(pk, name):
    try:
        body = contract.encode(registration_id=pk, name=name)
    except contract.ContractError:
        return
    assert contract.decode(body) == contract.Message(registration_id=pk, name=contract.clean_name(name))
