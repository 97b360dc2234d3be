// Package service is what the daemon (`dispatch serve`) adds to a
// controller: the schedules of the home's projects, checked on the
// controller's clock, and the runs they begin when due.
package service
