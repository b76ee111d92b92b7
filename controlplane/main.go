// One binary for the four control-plane programs, so that they link once (as k3s does): the
// program is chosen by the name it is called by (a link named kube-apiserver) or by its first
// argument (controlplane kube-apiserver --flags...).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones without the host's zoneinfo, as upstream's mains

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // the build-info metric, as upstream's mains
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if _, known := commands[name]; !known && name != "etcd" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == "etcd" {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	}
	newCommand, known := commands[name]
	if !known {
		fmt.Fprintln(os.Stderr, "usage: controlplane {etcd|kube-apiserver|kube-controller-manager|kube-scheduler} [flags]")
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}
