import re
import secrets

from django import forms

from tickets import contract

SUBMISSION_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
TAMPERED = "This form was changed on its way here, so nothing was registered. Please check the name and send it again."


def new_submission_key() -> str:
    return secrets.token_urlsafe(24)


class EveningForm(forms.Form):
    """The registration form. Its submission key is made when the form is
    rendered, so sending the same form twice registers the guest once."""

    # Length and characters are checked by the contract's rules, with its messages.
    name = forms.CharField(
        label="Guest name",
        strip=False,
        error_messages={"required": "Please enter the guest name."},
        widget=forms.TextInput(attrs={"maxlength": contract.MAX_NAME_CODE_POINTS, "autocomplete": "name"}),
    )
    # Optional; validated as Django validates e-mail. The guest's mails go there (mail/).
    email = forms.EmailField(
        label="E-mail (optional)",
        required=False,
        max_length=254,
        error_messages={"invalid": "Please enter an e-mail address such as guest@example.org, or leave it empty."},
        widget=forms.EmailInput(attrs={"autocomplete": "email"}),
    )
    submission_key = forms.CharField(
        widget=forms.HiddenInput, required=False, error_messages={"null_characters_not_allowed": TAMPERED}
    )

    def clean_name(self) -> str:
        try:
            return contract.clean_name(self.cleaned_data["name"])
        except contract.ContractError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_submission_key(self) -> str:
        # Hidden, so its error is shown for the whole form (see the template).
        key = self.cleaned_data["submission_key"]
        if key and not SUBMISSION_KEY.fullmatch(key):
            raise forms.ValidationError(TAMPERED)
        return key
