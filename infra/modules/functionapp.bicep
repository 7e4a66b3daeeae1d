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

@description('Python version of the Flex runtime; keep it equal to CI and the devcontainer.')
param pythonVersion string = '3.12'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Names read by shared/settings.py (field name upper-cased) and by host.json (%TASKHUB_NAME%).
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
  // checkov:skip=CKV_AZURE_222: The job API is the product's public endpoint; function keys (and Easy Auth if added) protect it.
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

output name string = functionApp.name
output url string = 'https://${functionApp.properties.defaultHostName}'
