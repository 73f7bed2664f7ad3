"""Whatever bytes arrive, each delivery ends as a ticket or as exactly one
RejectedMessage: never handed back, never in `.dead`, never taking the valid
deliveries of its batch down with it. Real worker processes, real RabbitMQ,
and the suite's database (SQLite, and PostgreSQL in bin/test's second run)."""

import hashlib
import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from nightjar_delivery import transport
from tests.helpers import MODES
from tickets import contract
from tickets.models import Registration, RejectedMessage, Ticket

pytestmark = [pytest.mark.broker, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# One of each kind that broke the worker before: a decoder that raises
# RecursionError, an oversize body, bytes PostgreSQL's text type refuses,
# lone surrogates, numbers too long to parse, repeated keys, NaN.
NASTY = [
    b"[" * 2000 + b"]" * 2000,
    b'{"id":' * 1300 + b"1" + b"}" * 1300,
    b'{"id":"R-0001","name":"' + b"\x00" * 5000 + b'","v":1}',
    b'{"id":"R-0001","name":"Nul\x00Byte","v":1}',
    b"\x00\x00\x00",
    b'{"id":"R-0001","name":"\\ud800","v":1}',
    b'{"id":"\\udfff","name":"x","v":1}',
    b'{"id":"R-0001","name":"x","v":' + b"9" * 5000 + b"}",
    b'{"id":"R-0001","name":"x","v":' + b"9" * 3000 + b"}",
    b'{"id":"R-0001","id":"R-0002","name":"x","v":1}',
    b'{"id":"R-0001","name":"x","v":NaN}',
    b'{"id":"R-999999999999","name":"x","v":1}',
    b"\xed\xa0\x80\xff\xfe",
    b"",
]


def hostile_bodies():
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None)),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
        max_leaves=20,
    )
    return st.one_of(
        st.binary(max_size=400),
        json_values.map(lambda value: json.dumps(value).encode()),
        st.integers(min_value=1, max_value=2040).map(lambda depth: b"[" * depth + b"]" * depth),
        st.integers(min_value=10**50, max_value=10**3000).map(lambda n: b'{"id":"R-0001","name":"x","v":%d}' % n),
        st.sampled_from(NASTY),
    )


def expect_outcomes(bodies: list[bytes], registrations: list[Registration], published: Counter) -> None:
    """Every valid body made its ticket; every other publication one record."""
    for registration in registrations:
        assert registration.tickets.count() == 1, registration.code
    for body, times in published.items():
        recorded = RejectedMessage.objects.filter(body_sha256=hashlib.sha256(body).hexdigest()).count()
        assert recorded == times, (body[:80], recorded, times)
    counts = transport.queue_counts(transport.queue_name())
    assert counts["ready"] == 0 and counts["dead"] == 0, counts


def run_worker(workers, mode) -> None:
    result = workers.run("--drain", *mode, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@MODES
def test_each_nasty_body_is_recorded_once_and_its_valid_neighbours_get_tickets(mode, workers):
    guests = [Registration.objects.create(name=f"Neighbour {n}") for n in range(3)]
    valid = [contract.encode(registration_id=g.pk, name=g.name) for g in guests]
    # Valid deliveries on both sides of every nasty one, inside one batch.
    transport.publish_raw([valid[0], *NASTY[:7], valid[1], *NASTY[7:], valid[2]])
    run_worker(workers, mode)
    expect_outcomes(NASTY, guests, Counter(NASTY))
    assert Ticket.objects.count() == 3
    nul = RejectedMessage.objects.get(body_sha256=hashlib.sha256(NASTY[3]).hexdigest())
    assert "\x00" not in nul.body_excerpt and "\\x00" in nul.body_excerpt
    assert nul.body_size == len(NASTY[3]) and nul.registration is None  # R-0001 does not exist here
    deep = RejectedMessage.objects.get(body_sha256=hashlib.sha256(NASTY[0]).hexdigest())
    assert "could not be read as JSON (RecursionError)" in deep.reason


@pytest.fixture
def published_so_far() -> Counter:
    """Publications per body across one test's examples (the database keeps them)."""
    return Counter()


@MODES
@hypothesis_settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies=st.lists(hostile_bodies(), min_size=1, max_size=25), valid_count=st.integers(0, 3))
@example(bodies=NASTY, valid_count=2)
def test_arbitrary_bytes_and_json_end_as_a_ticket_or_one_rejected_message(
    mode, workers, published_so_far, bodies, valid_count
):
    guests = [Registration.objects.create(name=f"Guest {Registration.objects.count() + 1}") for _ in range(valid_count)]
    valid = [contract.encode(registration_id=g.pk, name=g.name) for g in guests]
    hostile = [body for body in bodies if body not in valid]
    published_so_far.update(hostile)
    transport.publish_raw(valid + hostile)
    run_worker(workers, mode)
    expect_outcomes(hostile, guests, Counter({body: published_so_far[body] for body in hostile}))
