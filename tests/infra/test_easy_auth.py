"""The Easy Auth option of the Bicep: Entra ID sign-in, 401 for the API, no secret, and the settings it implies."""

from __future__ import annotations

import json

from tests.infra.bicep import INFRA, app_settings_vars, body, module, parse, resources


def _auth() -> tuple[str, dict]:
    [declaration] = resources(module("functionapp"), "Microsoft.Web/sites/config").values()
    return str(declaration["config"].get("condition")), body(declaration)


def test_easy_auth_is_optional_and_off_by_default() -> None:
    main = parse(INFRA / "main.bicep")["parameters"]
    assert main["easyAuthClientId"]["default"] == ""
    condition, config = _auth()
    assert condition == "easyAuthEnabled"
    switch = module("functionapp")["variables"]["easyAuthEnabled"]["value"]["operator"]
    assert switch["type"] == "not"
    assert switch["operands"]["bool_value"]["function"] == {
        "type": "empty",
        "parameters": {"item_to_test": "easyAuthClientId"},
    }
    assert config["name"] == "authsettingsV2" and config["parent"] == "functionApp"
    given = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert given["easyAuthClientId"]["value"] == "${EASY_AUTH_CLIENT_ID=}"


def test_the_api_answers_401_and_only_health_and_the_console_files_are_open() -> None:
    _, config = _auth()
    props = config["properties"]
    assert props["platform"]["enabled"] is True
    validation = props["globalValidation"]
    assert validation["requireAuthentication"] is True
    assert validation["unauthenticatedClientAction"] == "Return401"
    assert set(validation["excludedPaths"]) == {"/api/health", "/api/ui", "/api/ui/*"}
    assert props["httpSettings"]["requireHttps"] is True


def test_entra_id_provider_with_the_tenant_issuer_and_no_secret() -> None:
    _, config = _auth()
    aad = config["properties"]["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] is True
    registration = aad["registration"]
    assert registration["clientId"] == "easyAuthClientId"
    assert registration["openIdIssuer"].endswith("${easyAuthTenantId}/v2.0")
    assert "clientSecretSettingName" not in registration and "clientSecretCertificateThumbprint" not in registration
    assert "easyAuthClientId" in aad["validation"]["allowedAudiences"]


def test_the_admin_role_is_an_app_setting() -> None:
    assert app_settings_vars()["appCodeSettings"]["JOBS_ADMIN_ROLE"] == "jobsAdminRole"
    assert app_settings_vars()["appCodeSettings"]["VERIFIED_QUERIES_SHARED_ROLES"] == "verifiedQueriesSharedRoles"
    # The platform, not the Bicep, says whether Easy Auth is on: the app must never be told by hand.
    for group in app_settings_vars().values():
        assert "WEBSITE_AUTH_ENABLED" not in group
