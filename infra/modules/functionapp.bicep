// Flex Consumption (FC1) plan and the Python function app. The app runs as its user-assigned identity:
// host storage, the deployment package, Durable, OpenAI, Search, SQL and telemetry all use Entra tokens.
// Settings Flex deprecates (FUNCTIONS_WORKER_RUNTIME, FUNCTIONS_EXTENSION_VERSION, WEBSITE_RUN_FROM_PACKAGE,
// WEBSITE_CONTENT*, SCM_DO_BUILD_DURING_DEPLOYMENT, linuxFxVersion, alwaysOn...) are deliberately absent.
param name string
param planName string
param location string
param tags object
param identityId string
param identityClientId string
param storageAccountName string
param deploymentContainerName string
param instanceMemoryMB int
param maximumInstanceCount int
param durableAlwaysReadyInstances int
param applicationInsightsName string

@allowed([
  'azureStorage'
  'durableTaskScheduler'
])
param durableBackend string
param taskHubName string
param durableTaskSchedulerEndpoint string
param openAiEndpoint string
param chatDeploymentName string
param embeddingDeploymentName string
param embeddingModelName string
param searchEndpoint string
param searchIndexName string
param searchSemanticConfigName string
param sqlServerFqdn string
param sqlDatabaseName string

@description('Entra app registration client id for App Service Authentication (Easy Auth); empty = off.')
param easyAuthClientId string = ''
@description('Tenant whose users may sign in.')
param easyAuthTenantId string = tenant().tenantId
@description('App role whose members see every job (read by api/auth.py as JOBS_ADMIN_ROLE).')
param jobsAdminRole string = 'Jobs.Admin'
@description('App roles (comma-separated) whose verified queries everyone sees (read as VERIFIED_QUERIES_SHARED_ROLES).')
param verifiedQueriesSharedRoles string = 'VerifiedQueries.Curator'
@minValue(1)
@description('Days before a finished job\'s history is purged (read by api/maintenance.py as JOB_HISTORY_RETENTION_DAYS).')
param jobHistoryRetentionDays int = 30

@description('Management endpoint of the code interpreter session pool; empty = no code runs (SANDBOX_PROVIDER=off).')
param sandboxSessionsEndpoint string = ''
@description('USD per session-hour, read by run_python as SANDBOX_PRICE_PER_HOUR.')
param sandboxPricePerHour string = '0.03'

@description('Python version of the Flex runtime; keep it equal to CI and the devcontainer.')
param pythonVersion string = '3.12'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Names read by shared/runtime/settings.py (field name upper-cased) and by host.json (%TASKHUB_NAME%).
var appCodeSettings = {
  TASKHUB_NAME: taskHubName
  AZURE_CLIENT_ID: identityClientId
  LLM_PROVIDER: 'azure_openai'
  AZURE_OPENAI_ENDPOINT: openAiEndpoint
  AZURE_OPENAI_CHAT_DEPLOYMENT: chatDeploymentName
  AZURE_OPENAI_EMBEDDING_DEPLOYMENT: embeddingDeploymentName
  SEARCH_PROVIDER: 'azure'
  AZURE_SEARCH_ENDPOINT: searchEndpoint
  AZURE_SEARCH_INDEX: searchIndexName
  AZURE_SEARCH_SEMANTIC_CONFIG: searchSemanticConfigName
  AZURE_SEARCH_VECTORIZER_MODEL: embeddingModelName
  SQL_PROVIDER: 'azure_sql'
  AZURE_SQL_SERVER: sqlServerFqdn
  AZURE_SQL_DATABASE: sqlDatabaseName
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
  JOBS_ADMIN_ROLE: jobsAdminRole
  VERIFIED_QUERIES_SHARED_ROLES: verifiedQueriesSharedRoles
  JOB_HISTORY_RETENTION_DAYS: string(jobHistoryRetentionDays)
  SANDBOX_PROVIDER: empty(sandboxSessionsEndpoint) ? 'off' : 'azure_sessions'
  SANDBOX_SESSIONS_ENDPOINT: sandboxSessionsEndpoint
  SANDBOX_PRICE_PER_HOUR: sandboxPricePerHour
  // The job cost ledger prices what this template deploys (shared/runtime/ledger.py; dts.bicep's SKU is Consumption).
  COST_DURABLE_BACKEND: durableBackend == 'durableTaskScheduler' ? 'dts_consumption' : 'azure_storage'
  COST_HOSTING: durableAlwaysReadyInstances > 0 ? 'flex_always_ready' : 'flex_on_demand'
  COST_INSTANCE_MEMORY_MB: string(instanceMemoryMB)
}

// Read by the Functions host and its extensions (documented in docs/settings.md).
var platformSettings = {
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  AzureWebJobsStorage__blobServiceUri: storage.properties.primaryEndpoints.blob
  AzureWebJobsStorage__queueServiceUri: storage.properties.primaryEndpoints.queue
  AzureWebJobsStorage__tableServiceUri: storage.properties.primaryEndpoints.table
  // Telemetry ingestion with an Entra token (the component has local auth disabled).
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'Authorization=AAD;ClientId=${identityClientId}'
  AzureFunctionsJobHost__telemetryMode: 'OpenTelemetry'
  // HTTP streams (azurefunctions-extensions-http-fastapi) for the job event stream, as Microsoft documents it.
  PYTHON_ENABLE_INIT_INDEXING: '1'
}

// Azure Storage provider on Flex: poll queues at most every 10 s so idle instances scale in.
var azureStorageDurableSettings = {
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__maxQueuePollingInterval: '00:00:10'
}

// Durable Task Scheduler: identity-based connection, no key in the string.
var durableTaskSchedulerSettings = {
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__type: 'azureManaged'
  AzureFunctionsJobHost__extensions__durableTask__storageProvider__connectionStringName: 'DURABLE_TASK_SCHEDULER_CONNECTION_STRING'
  DURABLE_TASK_SCHEDULER_CONNECTION_STRING: 'Endpoint=${durableTaskSchedulerEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'
}

var durableSettings = durableBackend == 'durableTaskScheduler' ? durableTaskSchedulerSettings : azureStorageDurableSettings
var appSettings = union(appCodeSettings, platformSettings, durableSettings)

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225: Flex Consumption zone redundancy is available only in some regions; enable it per region.
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    tier: 'FlexConsumption'
    name: 'FC1'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222: The job API is the product's public endpoint; function keys or Easy Auth (easyAuthClientId) protect it.
  // checkov:skip=CKV_AZURE_17: Clients authenticate with function keys, not client certificates.
  // checkov:skip=CKV_AZURE_212: Flex Consumption scales instances itself; the durable group keeps always-ready instances.
  // checkov:skip=CKV_AZURE_213: Flex Consumption does not use the App Service health-check setting; /api/health serves probes.
  name: name
  location: location
  tags: tags
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    publicNetworkAccess: 'Enabled'
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      remoteDebuggingEnabled: false
      appSettings: [for setting in items(appSettings): {
        name: setting.key
        value: setting.value
      }]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        instanceMemoryMB: instanceMemoryMB
        maximumInstanceCount: maximumInstanceCount
        alwaysReady: [
          {
            name: 'durable'
            instanceCount: durableAlwaysReadyInstances
          }
        ]
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// Basic-auth publishing (FTP and SCM) stays off: azd deploys with an Entra token.
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  properties: {
    allow: false
  }
}

// App Service Authentication with Microsoft Entra ID (when easyAuthClientId is set). The platform signs users in,
// strips client-sent X-MS-CLIENT-PRINCIPAL* headers, sets its own and sets WEBSITE_AUTH_ENABLED=True, which
// makes the app trust them (api/auth.py): each user then sees only their own jobs. No client secret: sign-in
// uses ID tokens (enable them on the app registration) and API callers send bearer tokens for the app.
var easyAuthEnabled = !empty(easyAuthClientId)

resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (easyAuthEnabled) {
  // checkov:skip=CKV_AZURE_13: This is the authentication; authsettingsV2 turns it on with platform.enabled, the check reads the V1 shape.
  // checkov:skip=CKV_AZURE_63: Site-config check (HTTP logging) misapplied to the auth settings resource; telemetry goes to App Insights.
  // checkov:skip=CKV_AZURE_65: Site-config check (detailed error messages) misapplied to the auth settings resource.
  // checkov:skip=CKV_AZURE_66: Site-config check (failed request tracing) misapplied to the auth settings resource.
  // checkov:skip=CKV_AZURE_80: Site-config check (.NET framework version) misapplied; the app is Python on Flex Consumption.
  // checkov:skip=CKV_AZURE_88: Site-config check (Azure Files) misapplied; Flex Consumption has no content share.
  // checkov:skip=CKV_AZURE_222: Site check (public network access) misapplied; this resource is what gates the public endpoint.
  parent: functionApp
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      // The API answers 401 to anonymous callers instead of redirecting them to a sign-in page.
      unauthenticatedClientAction: 'Return401'
      // Probes, and the console's static files (no data), which offer the sign-in link.
      excludedPaths: [
        '/api/health'
        '/api/ui'
        '/api/ui/*'
      ]
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: easyAuthClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${easyAuthTenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            easyAuthClientId
            'api://${easyAuthClientId}'
          ]
        }
      }
    }
    login: {
      // /.auth/me (the console's "who am I") needs the token store.
      tokenStore: {
        enabled: true
      }
    }
    httpSettings: {
      requireHttps: true
    }
  }
}

output name string = functionApp.name
output url string = 'https://${functionApp.properties.defaultHostName}'
