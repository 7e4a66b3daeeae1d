"""Security properties asserted on the parsed Bicep: keyless, identity everywhere, least privilege."""

from __future__ import annotations

import re

from tests.infra.bicep import (
    INFRA,
    app_setting_names,
    app_settings_vars,
    bicep_files,
    body,
    function_names,
    module,
    parse,
    resources,
    role_assignments,
    walk,
)

# Built-in role definition ids (the same GUID in every tenant).
STORAGE_BLOB_DATA_OWNER = "b7e6dc6d-f1e8-4753-8033-0f276bb0955b"
STORAGE_QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
STORAGE_TABLE_DATA_CONTRIBUTOR = "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
COGNITIVE_SERVICES_OPENAI_USER = "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd"
SEARCH_INDEX_DATA_READER = "1407120a-92aa-4202-b7e9-c0e197c71c8f"
SEARCH_INDEX_DATA_CONTRIBUTOR = "8ebe5a00-799e-43f5-93ac-243d3dce84a7"
SEARCH_SERVICE_CONTRIBUTOR = "7ca78c08-252a-4471-8644-bb5ff32d4ba0"
DURABLE_TASK_DATA_CONTRIBUTOR = "0ad04412-c4d5-4796-b79c-f76d14c8d402"

# (module file, principal, role) for every assignment the templates may make, and nothing else.
EXPECTED_ASSIGNMENTS = {
    ("storage.bicep", "appPrincipalId", STORAGE_BLOB_DATA_OWNER),
    ("storage.bicep", "appPrincipalId", STORAGE_QUEUE_DATA_CONTRIBUTOR),
    ("storage.bicep", "appPrincipalId", STORAGE_TABLE_DATA_CONTRIBUTOR),
    ("monitoring.bicep", "appPrincipalId", MONITORING_METRICS_PUBLISHER),
    ("openai.bicep", "appPrincipalId", COGNITIVE_SERVICES_OPENAI_USER),
    ("search.bicep", "appPrincipalId", SEARCH_INDEX_DATA_READER),
    ("dts.bicep", "appPrincipalId", DURABLE_TASK_DATA_CONTRIBUTOR),
    ("openai.bicep", "deployerPrincipalId", COGNITIVE_SERVICES_OPENAI_USER),
    ("search.bicep", "deployerPrincipalId", SEARCH_INDEX_DATA_CONTRIBUTOR),
    ("search.bicep", "deployerPrincipalId", SEARCH_SERVICE_CONTRIBUTOR),
    ("dts.bicep", "deployerPrincipalId", DURABLE_TASK_DATA_CONTRIBUTOR),
}
BROAD_ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635",  # Owner
    "b24988ac-6180-42a0-ab88-20f7382dd24c",  # Contributor
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9",  # User Access Administrator
    "17d1049b-9a84-46fb-8f53-869881c3d3ab",  # Storage Account Contributor
    "a001fd3d-188f-4b5d-821b-7da978bf7442",  # Cognitive Services OpenAI Contributor
}

SECRET_NAME = re.compile(r"key|secret|password|connectionstring|sas|token", re.I)


def test_role_assignments_are_exactly_the_least_privilege_set() -> None:
    found = role_assignments()
    actual = {(a.file, a.principal, a.role_id) for a in found}
    assert actual == EXPECTED_ASSIGNMENTS
    assert len(found) == len(EXPECTED_ASSIGNMENTS), "duplicate role assignments"
    assert {a.role_id for a in found} == {
        STORAGE_BLOB_DATA_OWNER,
        STORAGE_QUEUE_DATA_CONTRIBUTOR,
        STORAGE_TABLE_DATA_CONTRIBUTOR,
        MONITORING_METRICS_PUBLISHER,
        COGNITIVE_SERVICES_OPENAI_USER,
        SEARCH_INDEX_DATA_READER,
        SEARCH_INDEX_DATA_CONTRIBUTOR,
        SEARCH_SERVICE_CONTRIBUTOR,
        DURABLE_TASK_DATA_CONTRIBUTOR,
    }
    assert not {a.role_id for a in found} & BROAD_ROLES


def test_the_app_can_only_read_the_search_index() -> None:
    app_search = {a.role_id for a in role_assignments() if a.file == "search.bicep" and a.principal == "appPrincipalId"}
    assert app_search == {SEARCH_INDEX_DATA_READER}


def test_the_queue_role_only_backs_the_azure_storage_durable_provider() -> None:
    storage = {a.role_id: a for a in role_assignments() if a.file == "storage.bicep"}
    assert not storage[STORAGE_BLOB_DATA_OWNER].conditional
    assert storage[STORAGE_QUEUE_DATA_CONTRIBUTOR].conditional
    # Tables hold the definitions store whatever the Durable backend (and Durable's state on Azure Storage).
    assert not storage[STORAGE_TABLE_DATA_CONTRIBUTOR].conditional
    assert "definitions" in (INFRA / "modules" / "storage.bicep").read_text(encoding="utf-8")
    assert module("storage")["variables"]["durableNeedsQueuesAndTables"]["value"] == {
        "operator": {"type": "equals", "operands": {"operand_1": "durableBackend", "operand_2": "azureStorage"}}
    }


def test_role_assignments_are_keyed_by_resource_principal_and_role() -> None:
    for path in bicep_files():
        for symbol, res in resources(parse(path), "Microsoft.Authorization/roleAssignments").items():
            cfg = body(res)
            name = cfg["name"]["function"]
            assert name["type"] == "guid", symbol
            args = list(name["parameters"].values())
            role_var = cfg["properties"]["roleDefinitionId"]["function"]["parameters"]["resource_name_1"]
            assert cfg["properties"]["principalId"] in args and role_var in args, symbol
            principal_type = cfg["properties"]["principalType"]
            expected = (
                "ServicePrincipal" if cfg["properties"]["principalId"] == "appPrincipalId" else "deployerPrincipalType"
            )
            assert principal_type == expected, symbol


def test_no_shared_keys_anywhere() -> None:
    storage = body(resources(module("storage"), "Microsoft.Storage/storageAccounts")["storage"])["properties"]
    assert storage["allowSharedKeyAccess"] is False
    assert storage["allowBlobPublicAccess"] is False
    assert storage["minimumTlsVersion"] == "TLS1_2"
    assert storage["supportsHttpsTrafficOnly"] is True
    assert storage["defaultToOAuthAuthentication"] is True
    container = body(
        resources(module("storage"), "Microsoft.Storage/storageAccounts/blobServices/containers")["deploymentContainer"]
    )
    assert container["properties"]["publicAccess"] == "None"

    openai = body(resources(module("openai"), "Microsoft.CognitiveServices/accounts")["account"])["properties"]
    assert openai["disableLocalAuth"] is True
    search = body(resources(module("search"), "Microsoft.Search/searchServices")["search"])["properties"]
    assert search["disableLocalAuth"] is True
    assert "authOptions" not in search
    workspace = body(resources(module("monitoring"), "Microsoft.OperationalInsights/workspaces")["logAnalytics"])
    assert workspace["properties"]["features"]["disableLocalAuth"] is True
    insights = body(resources(module("monitoring"), "Microsoft.Insights/components")["applicationInsights"])
    assert insights["properties"]["DisableLocalAuth"] is True
    assert insights["properties"]["WorkspaceResourceId"]


def test_sql_is_entra_only_with_the_deployer_as_admin() -> None:
    server = body(resources(module("sql"), "Microsoft.Sql/servers")["server"])["properties"]
    admins = server["administrators"]
    assert admins["azureADOnlyAuthentication"] is True
    assert admins["administratorType"] == "ActiveDirectory"
    assert admins["sid"] == "adminPrincipalId"
    assert server["minimalTlsVersion"] == "1.2"
    assert "administratorLogin" not in server and "administratorLoginPassword" not in server
    main = parse(INFRA / "main.bicep")
    assert body(main["modules"]["sql"])["params"]["adminPrincipalId"] == "principalId"


def test_no_secret_is_read_or_emitted() -> None:
    for path in bicep_files():
        tree = parse(path)
        called = function_names(tree)
        assert not {f for f in called if f.lower().startswith("list")}, f"{path.name} calls a list*() function"
        for name, param in (tree.get("parameters") or {}).items():
            decorators = {d["type"] for d in param.get("decorators", [])}
            assert "secure" not in decorators, f"{path.name}: secure parameter {name} means a secret is passed around"
        for name, output in (tree.get("outputs") or {}).items():
            assert not SECRET_NAME.search(name), f"{path.name}: output {name} looks like a secret"
            flat = repr(output["value"]).lower()
            for marker in ("connectionstring", "instrumentationkey", "listkeys", "secret", "password"):
                assert marker not in flat, f"{path.name}: output {name} exposes {marker}"
        text = path.read_text()
        for marker in ("AccountKey=", "SharedAccessSignature", "InstrumentationKey=", "administratorLoginPassword"):
            assert marker not in text, f"{path.name} contains {marker}"


def test_app_settings_carry_no_secret() -> None:
    names = app_setting_names()
    # A connection string for a component with local auth disabled identifies it; it grants nothing.
    allowed = {
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
        "AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName",
    }
    suspicious = {n for n in names if SECRET_NAME.search(n.replace("_", ""))} - allowed
    assert not suspicious
    settings = app_settings_vars()
    dts = settings["durableTaskSchedulerSettings"]["DURABLE_TASK_SCHEDULER_CONNECTION_STRING"]
    assert "Authentication=ManagedIdentity" in dts and "ClientID=${identityClientId}" in dts


def test_identity_everywhere_on_the_function_app() -> None:
    fa = module("functionapp")
    app = body(resources(fa, "Microsoft.Web/sites")["functionApp"])
    assert app["identity"]["type"] == "UserAssigned"
    assert list(app["identity"]["userAssignedIdentities"]) == ["'${identityId}'"]
    storage = app["properties"]["functionAppConfig"]["deployment"]["storage"]
    assert storage["authentication"] == {"type": "UserAssignedIdentity", "userAssignedIdentityResourceId": "identityId"}
    platform = app_settings_vars()["platformSettings"]
    assert platform["AzureWebJobsStorage__credential"] == "managedidentity"
    assert platform["AzureWebJobsStorage__clientId"] == "identityClientId"
    assert {
        "AzureWebJobsStorage__blobServiceUri",
        "AzureWebJobsStorage__queueServiceUri",
        "AzureWebJobsStorage__tableServiceUri",
    } <= set(platform)
    assert platform["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == "Authorization=AAD;ClientId=${identityClientId}"
    assert "AzureWebJobsStorage" not in app_setting_names(), "a plain AzureWebJobsStorage would be a connection string"
    assert app_settings_vars()["appCodeSettings"]["AZURE_CLIENT_ID"] == "identityClientId"
    assert app["properties"]["httpsOnly"] is True
    site = app["properties"]["siteConfig"]
    assert site["ftpsState"] == "Disabled" and site["minTlsVersion"] == "1.2"
    policies = resources(fa, "Microsoft.Web/sites/basicPublishingCredentialsPolicies")
    assert {body(p)["name"]: body(p)["properties"]["allow"] for p in policies.values()} == {"ftp": False, "scm": False}


def test_flex_consumption_shape() -> None:
    fa = module("functionapp")
    plan = body(resources(fa, "Microsoft.Web/serverfarms")["plan"])
    assert plan["sku"] == {"tier": "FlexConsumption", "name": "FC1"}
    assert plan["properties"]["reserved"] is True
    app = body(resources(fa, "Microsoft.Web/sites")["functionApp"])
    assert app["kind"] == "functionapp,linux"
    config = app["properties"]["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "pythonVersion"}
    assert fa["parameters"]["pythonVersion"]["default"] == "3.12"
    scale = config["scaleAndConcurrency"]
    assert scale["alwaysReady"] == [{"name": "durable", "instanceCount": "durableAlwaysReadyInstances"}]
    assert scale["instanceMemoryMB"] == "instanceMemoryMB" and scale["maximumInstanceCount"] == "maximumInstanceCount"
    main = parse(INFRA / "main.bicep")["parameters"]
    assert main["durableAlwaysReadyInstances"]["default"] == 1
    assert {"instanceMemoryMB", "maximumInstanceCount"} <= set(main)
    deprecated = {
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_EXTENSION_VERSION",
        "WEBSITE_RUN_FROM_PACKAGE",
        "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
        "WEBSITE_CONTENTSHARE",
        "SCM_DO_BUILD_DURING_DEPLOYMENT",
        "ENABLE_ORYX_BUILD",
        "WEBSITE_NODE_DEFAULT_VERSION",
    }
    assert not deprecated & app_setting_names()
    assert not {"linuxFxVersion", "alwaysOn", "functionAppScaleLimit"} & set(app["properties"]["siteConfig"])


def test_durable_backend_parameter_wires_the_scheduler() -> None:
    main = parse(INFRA / "main.bicep")
    backend = main["parameters"]["durableBackend"]
    allowed = next(d["argument"] for d in backend["decorators"] if d["type"] == "allowed")
    assert allowed == ["azureStorage", "durableTaskScheduler"]
    assert main["modules"]["durableTaskScheduler"]["config"]["condition"] == "useDurableTaskScheduler"
    dts = module("dts")
    assert set(resources(dts, "Microsoft.DurableTask/schedulers")) == {"scheduler"}
    assert set(resources(dts, "Microsoft.DurableTask/schedulers/taskHubs")) == {"taskHub"}
    settings = app_settings_vars()["durableTaskSchedulerSettings"]
    assert settings["AzureFunctionsJobHost__extensions__durableTask__storageProvider__type"] == "azureManaged"
    conn_name = settings["AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName"]
    assert conn_name in settings
    assert app_settings_vars()["appCodeSettings"]["TASKHUB_NAME"] == "taskHubName"


def test_every_resource_that_can_have_an_identity_uses_entra() -> None:
    # Services that call others or are called with tokens: managed identity on each that supports it.
    openai = body(resources(module("openai"), "Microsoft.CognitiveServices/accounts")["account"])
    search = body(resources(module("search"), "Microsoft.Search/searchServices")["search"])
    assert openai["identity"]["type"] == "SystemAssigned"
    assert search["identity"]["type"] == "SystemAssigned"
    for node in walk([parse(p) for p in bicep_files()]):
        if isinstance(node, dict) and "authentication" in node and isinstance(node["authentication"], dict):
            assert node["authentication"].get("type") == "UserAssignedIdentity"
