package e2e

import (
	"testing"

	"github.com/slacker-dev/slacker/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
