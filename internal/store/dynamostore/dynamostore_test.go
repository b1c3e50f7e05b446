package dynamostore_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/qunfa/qunfa/internal/awsemu"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}

// client returns a DynamoDB client for the test endpoint.
func client(tb testing.TB) *dynamodb.Client {
	tb.Helper()
	endpoint := awsemu.DynamoDB(tb)
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

var tableSeq atomic.Int64

// newTable creates a fresh table for one test and deletes it afterwards.
func newTable(tb testing.TB, c *dynamodb.Client) string {
	tb.Helper()
	name := fmt.Sprintf("qunfa-test-%d-%d", os.Getpid(), tableSeq.Add(1))
	if err := dynamostore.CreateTable(context.Background(), c, name); err != nil {
		tb.Fatalf("CreateTable: %v", err)
	}
	tb.Cleanup(func() {
		_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

func newStore(tb testing.TB, opts dynamostore.Options) *dynamostore.Store {
	tb.Helper()
	c := client(tb)
	return dynamostore.New(c, newTable(tb, c), opts)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return newStore(t, dynamostore.Options{})
	}, storetest.Capabilities{SlowWrites: true})
}
