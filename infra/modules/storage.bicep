// Host storage and the Flex deployment container. Shared keys are off: the host, Durable and the
// deployment all authenticate with the app's managed identity.
param name string
param location string
param tags object
param deploymentContainerName string
param appPrincipalId string

@allowed([
  'azureStorage'
  'durableTaskScheduler'
])
param durableBackend string

// Built-in roles. Blob Data Owner is what the Functions host-storage guidance names for AzureWebJobsStorage
// (host locks, keys, Flex deployment package); queues only back the Azure Storage Durable provider. Table Data
// Contributor is needed whatever the backend: the definitions store (agents, workflows, teams) is a table here.
var storageBlobDataOwnerRoleId = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var storageQueueDataContributorRoleId = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var storageTableDataContributorRoleId = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
var durableNeedsQueuesAndTables = durableBackend == 'azureStorage'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: Default action Allow on purpose (no VNet in this template: Flex workers reach it over the public endpoint; every caller needs an Entra token (local/key auth is disabled); shared keys are off).
  // checkov:skip=CKV_AZURE_59: Public endpoint on purpose (no VNet in this template: Flex workers reach it over the public endpoint; every caller needs an Entra token (local/key auth is disabled); shared keys are off).
  // checkov:skip=CKV_AZURE_206: LRS: the account holds only re-creatable host state, Durable history of in-flight jobs and the deployment package.
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource appBlobDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageBlobDataOwnerRoleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwnerRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appQueueDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (durableNeedsQueuesAndTables) {
  name: guid(storage.id, appPrincipalId, storageQueueDataContributorRoleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributorRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// The definitions store's table (shared/definitions/store.py creates it too when it is missing, e.g. on Azurite).
resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource definitionsTable 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = {
  parent: tableService
  name: 'definitions'
}

resource appTableDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageTableDataContributorRoleId)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageTableDataContributorRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output name string = storage.name
output id string = storage.id
output blobEndpoint string = storage.properties.primaryEndpoints.blob
