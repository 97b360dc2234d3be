// Package service is what the daemon (`dispatch serve`) adds to a
// controller: the schedules of the home's projects, checked on the
// controller's clock, and the runs they begin when due. Schedules.Between
// and Schedules.SetEnabled are the hooks a daemon's controller is built
// with (controller.Options.Between and SetSchedule); the controller does
// not import this package.
package service
