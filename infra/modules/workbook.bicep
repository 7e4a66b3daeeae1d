// The "Durable AI Jobs" workbook on the Application Insights component. Each chart's KQL lives in
// infra/monitoring/*.kql (documented in docs/monitoring.md) and is loaded here verbatim.
param location string
param tags object
param displayName string
param applicationInsightsId string

var componentType = 'microsoft.insights/components'

var charts = [
  {
    name: 'jobs-by-status'
    title: 'Jobs by status over time'
    query: loadTextContent('../monitoring/jobs-by-status.kql')
    visualization: 'timechart'
  }
  {
    name: 'step-latency-by-executor'
    title: 'Step latency percentiles by executor type (ms)'
    query: loadTextContent('../monitoring/step-latency-by-executor.kql')
    visualization: 'table'
  }
  {
    name: 'failures-by-error-code'
    title: 'Failed steps by error code'
    query: loadTextContent('../monitoring/failures-by-error-code.kql')
    visualization: 'barchart'
  }
  {
    name: 'tokens-and-cost-per-day'
    title: 'Tokens and estimated cost per day'
    query: loadTextContent('../monitoring/tokens-and-cost-per-day.kql')
    visualization: 'table'
  }
  {
    name: 'job-cost-by-meter'
    title: 'Job cost per day, user, workflow and meter (every meter; null: price unknown)'
    query: loadTextContent('../monitoring/job-cost-by-meter.kql')
    visualization: 'table'
  }
  {
    name: 'jobs-waiting-for-users'
    title: 'Jobs waiting for users, and for how long'
    query: loadTextContent('../monitoring/jobs-waiting-for-users.kql')
    visualization: 'table'
  }
]

var header = {
  type: 1
  name: 'header'
  content: {
    json: '## Durable AI Jobs\nJobs, steps, tokens and cost from the app\'s OpenTelemetry data. The KQL of each chart is in infra/monitoring/ and docs/monitoring.md.'
  }
}

var timeRangeParameter = {
  type: 9
  name: 'parameters'
  content: {
    version: 'KqlParameterItem/1.0'
    parameters: [
      {
        id: 'b3f1c7e2-6a4d-4c1e-9d2a-5f0e8c7b1a23'
        version: 'KqlParameterItem/1.0'
        name: 'TimeRange'
        label: 'Time range'
        type: 4
        isRequired: true
        value: {
          durationMs: 604800000
        }
        typeSettings: {
          selectableValues: [
            {
              durationMs: 3600000
            }
            {
              durationMs: 86400000
            }
            {
              durationMs: 604800000
            }
            {
              durationMs: 2592000000
            }
          ]
        }
      }
    ]
    style: 'pills'
    queryType: 0
    resourceType: componentType
  }
}

var chartItems = [for chart in charts: {
  type: 3
  name: chart.name
  content: {
    version: 'KqlItem/1.0'
    title: chart.title
    query: chart.query
    size: 0
    queryType: 0
    resourceType: componentType
    timeContextFromParameter: 'TimeRange'
    visualization: chart.visualization
  }
}]

var workbookContent = {
  version: 'Notebook/1.0'
  items: concat([
    header
    timeRangeParameter
  ], chartItems)
  fallbackResourceIds: [
    applicationInsightsId
  ]
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, applicationInsightsId, 'durable-ai-jobs-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    sourceId: applicationInsightsId
    serializedData: string(workbookContent)
  }
}

output id string = workbook.id
