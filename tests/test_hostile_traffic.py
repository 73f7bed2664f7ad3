"""Hostile traffic (issue 23): the work of one request stays bounded whatever a
guest sends, no guest secret reaches a log line, production refuses a public
key, and proxy headers count only from the proxy."""

import types
import unicodedata

import pytest
from django.test import Client

from tickets import contract
from tickets.models import Registration

ZALGO = "a" + "\u0301" * 5000  # past any name; 1.3 million of these took a worker down


class CountingUnicodedata(types.SimpleNamespace):
    """unicodedata as contract.py uses it, counting the characters it looks at."""

    def __init__(self) -> None:
        super().__init__(looked_at=0)

    def category(self, ch):
        self.looked_at += 1
        return unicodedata.category(ch)

    def normalize(self, form, text):
        self.looked_at += len(text)
        return unicodedata.normalize(form, text)


@pytest.fixture
def counted(monkeypatch):
    counter = CountingUnicodedata()
    monkeypatch.setattr(contract, "unicodedata", counter)
    return counter


def test_an_oversize_name_is_refused_before_any_per_character_work(counted):
    with pytest.raises(contract.ContractError, match="at most 100 characters"):
        contract.clean_name(ZALGO)
    assert counted.looked_at == 0


def test_the_characters_looked_at_grow_linearly_with_the_name(counted):
    def looked_at(text: str) -> int:
        counted.looked_at = 0
        contract.clusters(text)
        return counted.looked_at

    for unit in ("a\u0301", "\U0001f469\u200d", "e\u0301\u0323 "):
        assert looked_at(unit * 1000) <= 10 * looked_at(unit * 100) + 10
        assert looked_at(unit * 1000) <= len(unit * 1000)


def test_one_letter_with_299_combining_marks_is_not_one_character():
    name = "a" + "\u0301" * 299
    assert contract.name_length(name) > contract.MAX_NAME_LENGTH
    with pytest.raises(contract.ContractError, match="at most 100 characters"):
        contract.clean_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "Nguy\u1ec5n Th\u1ecb Minh",  # two marks on one letter
        "Ana \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",  # a family: seven code points
        "e\u0301\u0323\u0302 Ko",
    ],
)
def test_real_names_with_marks_and_joiners_still_count_as_typed(name):
    assert contract.name_length(unicodedata.normalize("NFC", name)) == len(contract.clusters(name))
    assert contract.clean_name(name)


@pytest.mark.django_db
def test_a_form_post_larger_than_any_name_is_refused_unread():
    response = Client().post("/evening/", {"name": "a" + "\u0301" * 100_000, "submission_key": "k"})
    assert response.status_code == 400
    assert not Registration.objects.exists()


@pytest.mark.django_db
def test_a_post_the_size_of_a_long_name_is_still_read():
    name = "\u0915\u093c" * 100  # 300 code points, three bytes each, percent-encoded
    response = Client().post("/evening/", {"name": name, "submission_key": "k" * 64})
    assert response.status_code == 302
