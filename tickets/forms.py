import secrets

from django import forms

from tickets import contract


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
        widget=forms.TextInput(attrs={"maxlength": contract.MAX_NAME_LENGTH, "autocomplete": "name"}),
    )
    submission_key = forms.CharField(widget=forms.HiddenInput, max_length=64, required=False)

    def clean_name(self) -> str:
        try:
            return contract.clean_name(self.cleaned_data["name"])
        except contract.ContractError as error:
            raise forms.ValidationError(str(error)) from None
