package spanner

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The emulator's answers to a transaction that lost a race are run again;
// other failures, with the same codes or not, are not.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.NotFound, "Transaction not found"), true},
		{status.Error(codes.FailedPrecondition, "Invalid transaction ID. It may have been aborted."), true},
		{status.Error(codes.FailedPrecondition, "Cannot read or query using a transaction after it has been committed."), true},
		{status.Error(codes.NotFound, "Table not found: baton_locks"), false},
		{status.Error(codes.FailedPrecondition, "Column stamp is not a commit timestamp column"), false},
		{status.Error(codes.PermissionDenied, "Transaction not found"), false},
		{errors.New("Transaction not found"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
