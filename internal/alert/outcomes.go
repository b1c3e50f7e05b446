package alert

import "time"

// ItemOutcomes carries settled per-recipient results of a shard (the
// sender publishes a turn's outcomes in events of up to 48 KB of items,
// at most 5 s after the first, never one per recipient). It is not an operator alert: the local runtime and the
// functions hand it to webhooks (items.outcomes) and the bus only, not to
// the alert log or the dashboard feed.
const ItemOutcomes Type = "ItemOutcomes"

// CanaryReady: a job's canary items were sent and the job paused (reason
// canary) for an operator to approve (resume) or cancel it. Webhooks
// deliver it as job.canary_ready.
const CanaryReady Type = "CanaryReady"

// CanaryReadyDetail: the job whose canary is ready and the canary's
// results when it paused (items still awaiting their answer are in
// neither count).
type CanaryReadyDetail struct {
	JobID     string `json:"job_id"`
	Canary    int64  `json:"canary"`
	Confirmed int64  `json:"confirmed"`
	Failed    int64  `json:"failed"`
}

// ItemOutcomesDetail: items whose outcome was recorded as final
// (confirmed, failed or abandoned).
type ItemOutcomesDetail struct {
	JobID string        `json:"job_id"`
	Items []ItemOutcome `json:"items"`
}

// ItemOutcome is one recipient's result. Ref is the submitter's reference
// of the recipient (when it was given and the store keeps it) and MsgID
// the provider's message id of a confirmed send, so a receiver can match
// the outcome with its own records without a look-up.
type ItemOutcome struct {
	Seq      int64     `json:"seq"`
	Account  string    `json:"account"`
	To       string    `json:"to"`
	Ref      string    `json:"ref,omitempty"`
	Status   string    `json:"status"`
	Category string    `json:"category,omitempty"`
	Code     string    `json:"code,omitempty"`
	MsgID    string    `json:"msgid,omitempty"`
	At       time.Time `json:"at"`
}
