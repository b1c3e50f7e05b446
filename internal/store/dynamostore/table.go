package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Attribute names of the table's keys and of the four sparse, KEYS_ONLY
// global secondary indexes (see the package doc).
const (
	attrPK = "pk"
	attrSK = "sk"

	indexTenantJobs = "tenantJobs" // g1pk = "TENANT#<tenant>", g1sk = "<createdAt>#<job>"; campaigns: "CAMPAIGNS", "<tenant>#<id>"
	indexRunning    = "running"    // g2pk = "RUNNING", g2sk = "<minute>#<job>#<shard>"; breakers: "BREAKERS#open|closed", "<tenant>#<account>"
	indexDue        = "due"        // g3pk = "DUE#<job>#<shard>", g3sk = "<min next>#<block>"
	indexSubmitted  = "submitted"  // g4pk = "SUB", g4sk = "<oldest submitted-at>#<job>#<shard>#<block>"
)

var indexKeys = map[string][2]string{
	indexTenantJobs: {"g1pk", "g1sk"},
	indexRunning:    {"g2pk", "g2sk"},
	indexDue:        {"g3pk", "g3sk"},
	indexSubmitted:  {"g4pk", "g4sk"},
}

// CreateTable creates the single qunfa table (on-demand billing) with its
// key schema and the four global secondary indexes, and waits until it is
// active. template.yaml declares the same table:
//
//	AttributeDefinitions: pk, sk, g1pk, g1sk, g2pk, g2sk, g3pk, g3sk, g4pk, g4sk (all S)
//	KeySchema: pk HASH, sk RANGE
//	GlobalSecondaryIndexes (Projection KEYS_ONLY each):
//	  tenantJobs (g1pk HASH, g1sk RANGE), running (g2pk, g2sk),
//	  due (g3pk, g3sk), submitted (g4pk, g4sk)
//	BillingMode: PAY_PER_REQUEST
//
// No TTL attribute is used. Campaigns and breakers reuse the tenantJobs and
// running indexes under partition keys of their own (see the package doc),
// so the operations features add no index.
func CreateTable(ctx context.Context, client *dynamodb.Client, tableName string) error {
	defs := []types.AttributeDefinition{
		{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
	}
	var gsis []types.GlobalSecondaryIndex
	for _, name := range []string{indexTenantJobs, indexRunning, indexDue, indexSubmitted} {
		k := indexKeys[name]
		defs = append(defs,
			types.AttributeDefinition{AttributeName: aws.String(k[0]), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(k[1]), AttributeType: types.ScalarAttributeTypeS},
		)
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(k[0]), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(k[1]), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		})
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(tableName),
		AttributeDefinitions: defs,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("create table %s: %w", tableName, err)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond // emulators create tables at once
		o.MaxDelay = 5 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(tableName)}, 5*time.Minute); err != nil {
		return fmt.Errorf("wait for table %s: %w", tableName, err)
	}
	return nil
}
