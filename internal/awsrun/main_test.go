package awsrun_test

import (
	"os"
	"testing"

	"github.com/qunfa/qunfa/internal/awsemu"
)

func TestMain(m *testing.M) {
	code := m.Run()
	awsemu.StopAll()
	os.Exit(code)
}
