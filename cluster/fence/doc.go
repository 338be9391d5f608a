// Package fence ties the leader's writes to its leadership and gives them
// their budgets.
//
// docs/leader.md has the why: "Fencing", "The clients and their budgets"
// and "Workers and the rollbacks' priority".
//
//   - Fence lets a write through only while the replica shows it holds
//     the Lease; Lock notes the elector's renews for it.
//   - RollbackClients are the rollbacks' fenced clients, in a rate limit
//     of their own.
//   - RollbackGate makes the applies' writes wait while a rollback is
//     being written.
//
// It reads the Lease. It writes nothing itself: it wraps the leader's
// clients, refusing or delaying their writes, and sends the Events of
// the recorder it makes (NewRecorder).
package fence
