"""Bad input gets a clear message and loses nothing."""

import pytest

from tests.helpers import register_by_form
from tickets.models import Registration

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", "Please enter the guest name."),
        ("   \t ", "Please enter the guest name."),
        ("x" * 101, "at most 100 characters (this one has 101)"),
        ("Ada\nLovelace", "cannot contain control characters"),
        ("Ada\x00", "Null characters are not allowed."),
        ("Bell\x07", "cannot contain control characters"),
        ("\u200b\u200b", "cannot contain invisible formatting characters"),
        ("\u3164", "must contain at least one visible letter or digit"),
        ("\u2800\u2800", "must contain at least one visible letter or digit"),
        ("\u0301", "must contain at least one visible letter or digit"),
        ("\u00ad", "cannot contain invisible formatting characters"),
        ("\u202eletaP aniM", "cannot contain text-direction control characters"),
    ],
    ids=[
        "empty",
        "whitespace",
        "too-long",
        "newline",
        "nul",
        "bell",
        "zwsp",
        "filler",
        "braille",
        "mark",
        "shy",
        "rlo",
    ],
)
def test_bad_names_re_render_the_form_with_the_error_and_store_nothing(client, name, error):
    response = register_by_form(client, name)
    assert response.status_code == 200
    page = response.content.decode()
    assert error in page
    assert 'aria-invalid="true"' in page
    assert "Register for the evening" in page
    assert not Registration.objects.exists()


@pytest.mark.fast
def test_a_name_of_exactly_100_characters_and_any_script_is_fine(client):
    # 100 x U+0958 is 200 code points once NFC-normalised: the guest typed 100.
    for name in ("x" * 100, "Zoë Ñúñez", "Светлана", "王小明", "\u0958" * 100, "👩\u200d🔬 Ada"):
        assert register_by_form(client, name).status_code == 302
    assert Registration.objects.count() == 6
    assert Registration.objects.get(name__startswith="\u0915").name == "\u0915\u093c" * 100


@pytest.mark.fast
@pytest.mark.parametrize("key", ["k" * 65, "no spaces", "<script>", "ключ", "a\x00b"])
def test_a_tampered_submission_key_shows_an_error_and_stores_nothing(client, key):
    response = client.post("/evening/", {"name": "Careful Guest", "submission_key": key})
    assert response.status_code == 200
    page = response.content.decode()
    assert "This form was changed on its way here, so nothing was registered." in page
    assert 'value="Careful Guest"' in page  # what the guest typed is kept
    assert not Registration.objects.exists()


@pytest.mark.broker_service
@pytest.mark.broker
def test_rabbitmq_stopped_during_registration_still_stores_it(client, rabbit, caplog):
    with rabbit.down():
        response = register_by_form(client, "Offline Guest")
        assert response.status_code == 302
        page = client.get(response["Location"]).content.decode()
    registration = Registration.objects.get()
    assert registration.name == "Offline Guest"
    assert "Your ticket is being prepared" in page
    assert f"{registration.code} stored but not published" in caplog.text
