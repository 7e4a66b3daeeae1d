// Log search alerts on the job telemetry: failed-job rate, and jobs waiting for their user too long.
// Queries: infra/monitoring/alert-*.kql (documented in docs/monitoring.md).
param location string
param tags object
param namePrefix string
param actionGroupName string
param applicationInsightsId string
param failedJobRatePercent int
param jobWaitingMinutes int
param alertEmail string

var hasEmail = !empty(alertEmail)

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (hasEmail) {
  name: actionGroupName
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'aijobs'
    enabled: true
    emailReceivers: [
      {
        name: 'owner'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

var actions = hasEmail ? {
  actionGroups: [
    actionGroup.id
  ]
} : {}

resource failedJobRate 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-failed-job-rate'
  location: location
  tags: tags
  properties: {
    displayName: 'Durable AI Jobs: failed-job rate above ${failedJobRatePercent}%'
    description: 'More than ${failedJobRatePercent}% of the jobs that finished in the last hour failed.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsightsId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT1H'
    criteria: {
      allOf: [
        {
          query: loadTextContent('../monitoring/alert-failed-job-rate.kql')
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'failed_rate_percent'
          operator: 'GreaterThan'
          threshold: failedJobRatePercent
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: actions
  }
}

resource jobsWaitingTooLong 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-jobs-waiting-too-long'
  location: location
  tags: tags
  properties: {
    displayName: 'Durable AI Jobs: jobs waiting for their user over ${jobWaitingMinutes} minutes'
    description: 'At least one job has been waiting for its user longer than ${jobWaitingMinutes} minutes.'
    severity: 3
    enabled: true
    scopes: [
      applicationInsightsId
    ]
    evaluationFrequency: 'PT15M'
    // The longest window a log search alert allows; a job must have logged its wait within it.
    windowSize: 'P2D'
    criteria: {
      allOf: [
        {
          query: replace(loadTextContent('../monitoring/alert-jobs-waiting-too-long.kql'), '{WaitingMinutes}', string(jobWaitingMinutes))
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: actions
  }
}
