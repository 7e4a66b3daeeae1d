// Durable AI Jobs: one azd environment = one resource group with everything the function app needs.
// Every data-plane call uses the app's user-assigned managed identity; no resource hands out keys.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment; used to derive resource names.')
param environmentName string

@minLength(1)
@description('Primary location for all resources.')
param location string

@description('Object id of the deploying user or service principal (azd sets AZURE_PRINCIPAL_ID). Becomes the SQL Entra admin and gets the data roles the postprovision hook needs.')
param principalId string

@allowed([
  'User'
  'ServicePrincipal'
])
@description('Kind of the deploying principal.')
param principalType string = 'User'

@description('Display name recorded for the SQL Entra admin (the deploying principal).')
param principalName string = 'azd-deployer'

@allowed([
  'azureStorage'
  'durableTaskScheduler'
])
@description('Durable Functions backend: the Azure Storage provider, or the managed Durable Task Scheduler.')
param durableBackend string = 'azureStorage'

@description('Durable task hub name (letters and digits, starting with a letter).')
param taskHubName string = 'DurableAIJobs'

@allowed([
  512
  2048
  4096
])
@description('Flex Consumption instance memory in MB.')
param instanceMemoryMB int = 2048

@minValue(1)
@maxValue(1000)
@description('Flex Consumption maximum instance count.')
param maximumInstanceCount int = 40

@minValue(0)
@maxValue(10)
@description('Always-ready instances for the durable group (orchestrators, activities, entities).')
param durableAlwaysReadyInstances int = 1

@description('Chat model name deployed in Azure OpenAI.')
param chatModelName string = 'gpt-4.1-mini'

@description('Chat model version.')
param chatModelVersion string = '2025-04-14'

@description('Chat deployment SKU (GlobalStandard, Standard, DataZoneStandard...).')
param chatDeploymentSku string = 'GlobalStandard'

@minValue(1)
@description('Chat deployment capacity in thousands of tokens per minute.')
param chatDeploymentCapacity int = 30

@description('Embedding model name deployed in Azure OpenAI.')
param embeddingModelName string = 'text-embedding-3-small'

@description('Embedding model version.')
param embeddingModelVersion string = '1'

@description('Embedding deployment SKU.')
param embeddingDeploymentSku string = 'GlobalStandard'

@minValue(1)
@description('Embedding deployment capacity in thousands of tokens per minute.')
param embeddingDeploymentCapacity int = 30

@allowed([
  'basic'
  'standard'
  'standard2'
  'standard3'
])
@description('Azure AI Search SKU (the free tier has no managed identity or semantic ranker).')
param searchSku string = 'basic'

@allowed([
  'disabled'
  'free'
  'standard'
])
@description('Azure AI Search semantic ranker plan. disabled leaves AZURE_SEARCH_SEMANTIC_CONFIG empty.')
param searchSemanticRanker string = 'free'

@description('Name of the search index the app queries and the postprovision hook creates.')
param searchIndexName string = 'jobs-docs'

@description('Name of the semantic configuration in the index (used when the semantic ranker is on).')
param searchSemanticConfigName string = 'default'

@description('Azure SQL database SKU. The default is serverless General Purpose that pauses when idle.')
param sqlDatabaseSku object = {
  name: 'GP_S_Gen5'
  tier: 'GeneralPurpose'
  family: 'Gen5'
  capacity: 1
}

@description('The one database schema the app identity may read (SELECT only). The postprovision hook grants it.')
param sqlReaderSchema string = 'dbo'

@minValue(1)
@maxValue(100)
@description('Alert when more than this percentage of finished jobs failed in the last hour.')
param alertFailedJobRatePercent int = 20

@minValue(5)
@maxValue(2820)
@description('Alert when a job has waited for its user longer than this many minutes (the alert looks back 2 days).')
param alertJobWaitingMinutes int = 240

@description('Optional e-mail address that receives the alerts. Empty: alerts fire in the portal only.')
param alertEmail string = ''

@description('Client id of the Microsoft Entra app registration that signs users in through App Service Authentication (Easy Auth). Empty: Easy Auth off, the function key alone protects the API and every key holder sees every job.')
param easyAuthClientId string = ''

@description('Tenant whose users may sign in (issuer https://login.microsoftonline.com/<tenant>/v2.0).')
param easyAuthTenantId string = tenant().tenantId

@minLength(1)
@description('App role (of the Easy Auth app registration) whose members see, answer and cancel every job.')
param jobsAdminRole string = 'Jobs.Admin'

@description('App roles (comma-separated) whose verified queries everyone sees and reuses; others\' are private.')
param verifiedQueriesSharedRoles string = 'VerifiedQueries.Curator'

@minValue(1)
@description('Days a finished job (completed, failed, cancelled) stays in the Durable store before the app purges its history.')
param jobHistoryRetentionDays int = 30

@description('Deploy a code interpreter session pool for run_python steps (docs/sandbox.md); false = no code runs.')
param deploySessionPool bool = true

@description('USD per session-hour of the pool, for the estimated cost of run_python steps (SANDBOX_PRICE_PER_HOUR).')
param sandboxPricePerHour string = '0.03'

var abbrs = loadJsonContent('abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var useDurableTaskScheduler = durableBackend == 'durableTaskScheduler'
var functionAppName = '${abbrs.webSitesFunctions}api-${resourceToken}'
var deploymentContainerName = 'app-package-${take(resourceToken, 7)}'

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: '${abbrs.resourcesResourceGroups}${environmentName}'
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    applicationInsightsName: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
    appPrincipalId: identity.outputs.principalId
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    appPrincipalId: identity.outputs.principalId
    durableBackend: durableBackend
  }
}

module openai 'modules/openai.bicep' = {
  name: 'openai'
  scope: rg
  params: {
    name: '${abbrs.cognitiveServicesAccounts}${resourceToken}'
    location: location
    tags: tags
    chatModelName: chatModelName
    chatModelVersion: chatModelVersion
    chatDeploymentSku: chatDeploymentSku
    chatDeploymentCapacity: chatDeploymentCapacity
    embeddingModelName: embeddingModelName
    embeddingModelVersion: embeddingModelVersion
    embeddingDeploymentSku: embeddingDeploymentSku
    embeddingDeploymentCapacity: embeddingDeploymentCapacity
    appPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module search 'modules/search.bicep' = {
  name: 'search'
  scope: rg
  params: {
    name: '${abbrs.searchSearchServices}${resourceToken}'
    location: location
    tags: tags
    sku: searchSku
    semanticRanker: searchSemanticRanker
    appPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module sql 'modules/sql.bicep' = {
  name: 'sql'
  scope: rg
  params: {
    serverName: '${abbrs.sqlServers}${resourceToken}'
    databaseName: '${abbrs.sqlServersDatabases}jobs'
    location: location
    tags: tags
    adminPrincipalId: principalId
    adminPrincipalType: principalType
    adminLogin: principalName
    databaseSku: sqlDatabaseSku
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsWorkspaceId
  }
}

module durableTaskScheduler 'modules/dts.bicep' = if (useDurableTaskScheduler) {
  name: 'durable-task-scheduler'
  scope: rg
  params: {
    name: '${abbrs.durableTaskSchedulers}${resourceToken}'
    location: location
    tags: tags
    taskHubName: taskHubName
    appPrincipalId: identity.outputs.principalId
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
}

module sessions 'modules/sessions.bicep' = if (deploySessionPool) {
  name: 'session-pool'
  scope: rg
  params: {
    name: '${abbrs.appSessionPools}${resourceToken}'
    location: location
    tags: tags
    appPrincipalId: identity.outputs.principalId
  }
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'function-app'
  scope: rg
  params: {
    name: functionAppName
    planName: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: union(tags, { 'azd-service-name': 'api' })
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    instanceMemoryMB: instanceMemoryMB
    maximumInstanceCount: maximumInstanceCount
    durableAlwaysReadyInstances: durableAlwaysReadyInstances
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    durableBackend: durableBackend
    taskHubName: taskHubName
    durableTaskSchedulerEndpoint: useDurableTaskScheduler ? durableTaskScheduler.outputs.endpoint : ''
    openAiEndpoint: openai.outputs.endpoint
    chatDeploymentName: openai.outputs.chatDeploymentName
    embeddingDeploymentName: openai.outputs.embeddingDeploymentName
    embeddingModelName: embeddingModelName
    searchEndpoint: search.outputs.endpoint
    searchIndexName: searchIndexName
    searchSemanticConfigName: searchSemanticRanker == 'disabled' ? '' : searchSemanticConfigName
    sqlServerFqdn: sql.outputs.serverFqdn
    sqlDatabaseName: sql.outputs.databaseName
    easyAuthClientId: easyAuthClientId
    easyAuthTenantId: easyAuthTenantId
    jobsAdminRole: jobsAdminRole
    verifiedQueriesSharedRoles: verifiedQueriesSharedRoles
    jobHistoryRetentionDays: jobHistoryRetentionDays
    sandboxSessionsEndpoint: deploySessionPool ? sessions.outputs.poolManagementEndpoint : ''
    sandboxPricePerHour: sandboxPricePerHour
  }
}

module workbook 'modules/workbook.bicep' = {
  name: 'workbook'
  scope: rg
  params: {
    location: location
    tags: tags
    displayName: 'Durable AI Jobs (${environmentName})'
    applicationInsightsId: monitoring.outputs.applicationInsightsId
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    location: location
    tags: tags
    namePrefix: '${abbrs.insightsScheduledQueryRules}${resourceToken}'
    actionGroupName: '${abbrs.insightsActionGroups}${resourceToken}'
    applicationInsightsId: monitoring.outputs.applicationInsightsId
    failedJobRatePercent: alertFailedJobRatePercent
    jobWaitingMinutes: alertJobWaitingMinutes
    alertEmail: alertEmail
  }
}

// Outputs in UPPER_SNAKE become azd environment values that the postprovision hook reads.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output AZURE_FUNCTION_URL string = functionApp.outputs.url
output AZURE_EASY_AUTH_ENABLED bool = !empty(easyAuthClientId)
output AZURE_DURABLE_BACKEND string = durableBackend
output AZURE_OPENAI_ENDPOINT string = openai.outputs.endpoint
output AZURE_OPENAI_CHAT_DEPLOYMENT string = openai.outputs.chatDeploymentName
output AZURE_OPENAI_EMBEDDING_DEPLOYMENT string = openai.outputs.embeddingDeploymentName
output AZURE_SEARCH_ENDPOINT string = search.outputs.endpoint
output AZURE_SEARCH_INDEX string = searchIndexName
output AZURE_SEARCH_VECTORIZER_MODEL string = embeddingModelName
output AZURE_SEARCH_SEMANTIC_CONFIG string = searchSemanticRanker == 'disabled' ? '' : searchSemanticConfigName
output AZURE_SQL_SERVER string = sql.outputs.serverFqdn
output AZURE_SQL_SERVER_NAME string = sql.outputs.serverName
output AZURE_SQL_DATABASE string = sql.outputs.databaseName
output AZURE_SQL_READER_SCHEMA string = sqlReaderSchema
output APP_IDENTITY_NAME string = identity.outputs.name
output APP_IDENTITY_PRINCIPAL_ID string = identity.outputs.principalId
output APP_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output AZURE_WORKBOOK_ID string = workbook.outputs.id
output AZURE_APPLICATION_INSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
