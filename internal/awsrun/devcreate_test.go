package awsrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/devstack"
)

// TestDevCreateMatchesTemplate: `qunfa dev --backend aws --create` makes
// the table and the queues template.yaml declares — keys, attribute
// types, indexes and their projections, billing; FIFO, deduplication,
// visibility, waits, retention, redrive — and running it again on existing
// resources keeps them.
func TestDevCreateMatchesTemplate(t *testing.T) {
	tp := loadTemplate(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(awsemu.DynamoDB(t)),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	sq := awsemu.SQSClient(awsemu.SQS(t))
	table := fmt.Sprintf("devcreate%d", time.Now().UnixNano())
	var url string
	for range 2 { // the second run finds everything there
		var err error
		if url, err = devstack.CreateAWSResources(ctx, db, sq, table); err != nil {
			t.Fatal(err)
		}
	}

	// The table.
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	want := at(tp.raw, "Resources", "Table", "Properties")
	var wantDefs, gotDefs []string
	for _, d := range at(want, "AttributeDefinitions").([]any) {
		wantDefs = append(wantDefs, fmt.Sprint(at(d, "AttributeName"), ":", at(d, "AttributeType")))
	}
	for _, d := range out.Table.AttributeDefinitions {
		gotDefs = append(gotDefs, aws.ToString(d.AttributeName)+":"+string(d.AttributeType))
	}
	if !slices.Equal(sorted(gotDefs), sorted(wantDefs)) {
		t.Errorf("attribute definitions %v, template.yaml %v", sorted(gotDefs), sorted(wantDefs))
	}
	keys := func(ks []any) string {
		s := ""
		for _, k := range ks {
			s += fmt.Sprint(at(k, "AttributeName"), " ", at(k, "KeyType"), ";")
		}
		return s
	}
	gotKeys := ""
	for _, k := range out.Table.KeySchema {
		gotKeys += aws.ToString(k.AttributeName) + " " + string(k.KeyType) + ";"
	}
	if w := keys(at(want, "KeySchema").([]any)); gotKeys != w {
		t.Errorf("key schema %q, template.yaml %q", gotKeys, w)
	}
	var wantIdx, gotIdx []string
	for _, g := range at(want, "GlobalSecondaryIndexes").([]any) {
		wantIdx = append(wantIdx, fmt.Sprint(at(g, "IndexName"), " ", keys(at(g, "KeySchema").([]any)), " ", at(g, "Projection", "ProjectionType")))
	}
	for _, g := range out.Table.GlobalSecondaryIndexes {
		k := ""
		for _, e := range g.KeySchema {
			k += aws.ToString(e.AttributeName) + " " + string(e.KeyType) + ";"
		}
		gotIdx = append(gotIdx, fmt.Sprint(aws.ToString(g.IndexName), " ", k, " ", g.Projection.ProjectionType))
	}
	if !slices.Equal(sorted(gotIdx), sorted(wantIdx)) {
		t.Errorf("indexes %v, template.yaml %v", sorted(gotIdx), sorted(wantIdx))
	}
	if b := out.Table.BillingModeSummary; b == nil || string(b.BillingMode) != at(want, "BillingMode") {
		t.Errorf("billing %+v, template.yaml %v", b, at(want, "BillingMode"))
	}

	// The queues.
	attrs := func(url string) map[string]string {
		out, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(url), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes
	}
	work := attrs(url)
	dlqURL := url[:len(url)-len(".fifo")] + "-dlq.fifo"
	dlq := attrs(dlqURL)
	for name, got := range map[string]map[string]string{"WorkQueue": work, "DeadLetterQueue": dlq} {
		props := at(tp.raw, "Resources", name, "Properties").(map[string]any)
		for prop, v := range props {
			switch prop {
			case "RedrivePolicy":
				var rp map[string]any
				if err := json.Unmarshal([]byte(got[prop]), &rp); err != nil {
					t.Fatalf("%s redrive policy %q: %v", name, got[prop], err)
				}
				dlqName := dlqURL[strings.LastIndex(dlqURL, "/")+1:]
				if text(rp["maxReceiveCount"]) != text(at(v, "maxReceiveCount")) || !strings.HasSuffix(text(rp["deadLetterTargetArn"]), ":"+dlqName) {
					t.Errorf("%s redrive policy %s, template.yaml %v (to DeadLetterQueue)", name, got[prop], v)
				}
			case "DeduplicationScope", "FifoThroughputLimit":
				// High-throughput FIFO: fauxqs neither takes nor reports
				// them (it answers its defaults); CreateAWSResources sets
				// them where the service knows them.
			case "SqsManagedSseEnabled":
				// Set, but fauxqs does not report it back.
				if g, ok := got[prop]; ok && g != text(v) {
					t.Errorf("%s %s = %s, template.yaml %v", name, prop, g, v)
				}
			default:
				if g := got[prop]; g != text(v) {
					t.Errorf("%s %s = %q, template.yaml %v", name, prop, g, v)
				}
			}
		}
	}
}

// text is how SQS writes a template value: numbers without exponent.
func text(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return fmt.Sprint(v)
}
