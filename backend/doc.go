// Package backend defines what a compute backend is (the Backend and
// Executable interfaces) and keeps the registry backends add themselves to,
// the database/sql driver way: a backend package calls Register in its init,
// and users choose one by name with Open.
package backend
