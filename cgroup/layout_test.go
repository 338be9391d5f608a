package cgroup

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testUID  = "8d7e1f52-1c3b-4a3e-9f1e-2b6c5d4a3f10"
	testUID_ = "8d7e1f52_1c3b_4a3e_9f1e_2b6c5d4a3f10"
	testID   = "a172cedcae47474b615c54d510a5d84a8dea3032e958587430b413538be3f333"
	// A static pod's UID: the kubelet's hash of its manifest.
	staticUID = "3f1c0b7e9d2a4c6e8f0a1b2c3d4e5f60"
)

func TestContainerDirFollowsKubeletAndRuntimeNaming(t *testing.T) {
	tests := []struct {
		name        string
		layout      Layout
		pod         PodCgroup
		containerID string
		want        string
	}{
		{
			name:        "systemd burstable containerd",
			layout:      Layout{Driver: DriverSystemd},
			pod:         PodCgroup{UID: testUID, QoS: QoSBurstable},
			containerID: "containerd://" + testID,
			want:        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope",
		},
		{
			name:        "systemd guaranteed cri-o sits under kubepods.slice",
			layout:      Layout{Driver: DriverSystemd, Root: "/"},
			pod:         PodCgroup{UID: testUID, QoS: QoSGuaranteed},
			containerID: "cri-o://" + testID,
			want:        "/kubepods.slice/kubepods-pod" + testUID_ + ".slice/crio-" + testID + ".scope",
		},
		{
			name:        "systemd besteffort docker",
			layout:      Layout{Driver: DriverSystemd},
			pod:         PodCgroup{UID: testUID, QoS: QoSBestEffort},
			containerID: "docker://" + testID,
			want:        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + testUID_ + ".slice/docker-" + testID + ".scope",
		},
		{
			name:        "systemd with cgroup root prefixes every slice",
			layout:      Layout{Driver: DriverSystemd, Root: "/k8s-nodes/a"},
			pod:         PodCgroup{UID: testUID, QoS: QoSBurstable},
			containerID: "containerd://" + testID,
			want: "/k8s_nodes.slice/k8s_nodes-a.slice/k8s_nodes-a-kubepods.slice/k8s_nodes-a-kubepods-burstable.slice/" +
				"k8s_nodes-a-kubepods-burstable-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope",
		},
		{
			name:        "cgroupfs burstable containerd",
			layout:      Layout{Driver: DriverCgroupfs},
			pod:         PodCgroup{UID: testUID, QoS: QoSBurstable},
			containerID: "containerd://" + testID,
			want:        "/kubepods/burstable/pod" + testUID + "/" + testID,
		},
		{
			name:        "cgroupfs guaranteed docker sits under kubepods",
			layout:      Layout{Driver: DriverCgroupfs, Root: "/"},
			pod:         PodCgroup{UID: testUID, QoS: QoSGuaranteed},
			containerID: "docker://" + testID,
			want:        "/kubepods/pod" + testUID + "/" + testID,
		},
		{
			name:        "cgroupfs cri-o prefixes the id",
			layout:      Layout{Driver: DriverCgroupfs},
			pod:         PodCgroup{UID: testUID, QoS: QoSBestEffort},
			containerID: "cri-o://" + testID,
			want:        "/kubepods/besteffort/pod" + testUID + "/crio-" + testID,
		},
		{
			name:        "cgroupfs with cgroup root",
			layout:      Layout{Driver: DriverCgroupfs, Root: "/k8s/node-1/"},
			pod:         PodCgroup{UID: staticUID, QoS: QoSBurstable},
			containerID: "containerd://" + testID,
			want:        "/k8s/node-1/kubepods/burstable/pod" + staticUID + "/" + testID,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.layout.ContainerDir(tt.pod, tt.containerID)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)

			pod, err := tt.layout.PodDir(tt.pod)
			require.NoError(t, err)
			assert.Equal(t, pod, got[:strings.LastIndexByte(got, '/')], "the container's cgroup is a child of the pod's")

			uid, id, ok := ParseContainerPath(got)
			require.True(t, ok, "ParseContainerPath(%q)", got)
			assert.Equal(t, tt.pod.UID, uid)
			assert.Equal(t, testID, id)
		})
	}
}

func TestKubepodsDir(t *testing.T) {
	tests := []struct {
		layout Layout
		want   string
	}{
		{Layout{Driver: DriverSystemd}, "/kubepods.slice"},
		{Layout{Driver: DriverCgroupfs}, "/kubepods"},
		{Layout{Driver: DriverSystemd, Root: "/custom"}, "/custom.slice/custom-kubepods.slice"},
		{Layout{Driver: DriverCgroupfs, Root: "/custom"}, "/custom/kubepods"},
	}
	for _, tt := range tests {
		got, err := tt.layout.KubepodsDir()
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%+v", tt.layout)
	}
}

func TestContainerDirRejectsBadInputNamingTheField(t *testing.T) {
	good := PodCgroup{UID: testUID, QoS: QoSBurstable}
	tests := []struct {
		name        string
		layout      Layout
		pod         PodCgroup
		containerID string
		wantInErr   []string
	}{
		{"unknown driver", Layout{Driver: "cgroupfs2"}, good, "containerd://" + testID, []string{"cgroup driver", `"cgroupfs2"`}},
		{"empty driver", Layout{}, good, "containerd://" + testID, []string{"cgroup driver"}},
		{"relative root", Layout{Driver: DriverCgroupfs, Root: "k8s"}, good, "containerd://" + testID, []string{"cgroup root", `"k8s"`}},
		{"root with ..", Layout{Driver: DriverSystemd, Root: "/a/../b"}, good, "containerd://" + testID, []string{"cgroup root"}},
		{"root with empty component", Layout{Driver: DriverSystemd, Root: "/a//b"}, good, "containerd://" + testID, []string{"cgroup root"}},
		{"malformed UID", Layout{Driver: DriverSystemd}, PodCgroup{UID: "not-a-uid", QoS: QoSBurstable}, "containerd://" + testID, []string{"pod UID", `"not-a-uid"`}},
		{"uppercase UID", Layout{Driver: DriverSystemd}, PodCgroup{UID: strings.ToUpper(testUID), QoS: QoSBurstable}, "containerd://" + testID, []string{"pod UID"}},
		{"UID with path", Layout{Driver: DriverCgroupfs}, PodCgroup{UID: "../../etc/passwd", QoS: QoSBurstable}, "containerd://" + testID, []string{"pod UID"}},
		{"empty UID", Layout{Driver: DriverCgroupfs}, PodCgroup{QoS: QoSBurstable}, "containerd://" + testID, []string{"pod UID"}},
		{"unknown QoS", Layout{Driver: DriverCgroupfs}, PodCgroup{UID: testUID, QoS: "burstable"}, "containerd://" + testID, []string{"pod QoS class", `"burstable"`, "Burstable"}},
		{"empty QoS", Layout{Driver: DriverCgroupfs}, PodCgroup{UID: testUID}, "containerd://" + testID, []string{"pod QoS class"}},
		{"unknown runtime", Layout{Driver: DriverCgroupfs}, good, "rkt://" + testID, []string{"container ID", "runtime", `"rkt"`}},
		{"no scheme", Layout{Driver: DriverCgroupfs}, good, testID, []string{"container ID", "<runtime>://<id>"}},
		{"bad id", Layout{Driver: DriverCgroupfs}, good, "containerd://../x", []string{"container ID", "hex"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.layout.ContainerDir(tt.pod, tt.containerID)
			require.Error(t, err)
			for _, s := range tt.wantInErr {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestParseContainerID(t *testing.T) {
	tests := []struct {
		in      string
		runtime Runtime
		id      string
		wantErr bool
	}{
		{in: "containerd://" + testID, runtime: RuntimeContainerd, id: testID},
		{in: "cri-o://" + testID, runtime: RuntimeCRIO, id: testID},
		{in: "docker://" + testID, runtime: RuntimeDocker, id: testID},
		{in: "containerd://abc", runtime: RuntimeContainerd, id: "abc"},
		{in: "", wantErr: true},
		{in: "containerd://", wantErr: true},
		{in: "containerd:/" + testID, wantErr: true},
		{in: "CONTAINERD://" + testID, wantErr: true},
		{in: "crio://" + testID, wantErr: true},
		{in: "containerd://" + strings.ToUpper(testID), wantErr: true},
		{in: "containerd://" + testID + "0", wantErr: true},
		{in: "containerd://" + testID + "/x", wantErr: true},
		{in: "containerd://abc://def", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			runtime, id, err := ParseContainerID(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "container ID")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.runtime, runtime)
			assert.Equal(t, tt.id, id)
		})
	}
}

func TestParseContainerPath(t *testing.T) {
	tests := []struct {
		name, path string
		uid, id    string // empty: ok is false
	}{
		{name: "systemd containerd", path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope", uid: testUID, id: testID},
		{name: "systemd guaranteed crio", path: "/kubepods.slice/kubepods-pod" + testUID_ + ".slice/crio-" + testID + ".scope", uid: testUID, id: testID},
		{name: "systemd docker static pod", path: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + staticUID + ".slice/docker-" + testID + ".scope", uid: staticUID, id: testID},
		{name: "file system path", path: "/sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/pod" + testUID + "/" + testID, uid: testUID, id: testID},
		{name: "relative path", path: "kubepods/pod" + testUID + "/crio-" + testID, uid: testUID, id: testID},
		{name: "trailing slash", path: "/kubepods/pod" + testUID + "/" + testID + "/", uid: testUID, id: testID},
		{name: "cgroup root prefix", path: "/k8s/kubepods/besteffort/pod" + testUID + "/" + testID, uid: testUID, id: testID},
		{name: "systemd cgroup root prefix", path: "/k8s.slice/k8s-kubepods.slice/k8s-kubepods-pod" + testUID_ + ".slice/cri-containerd-" + testID + ".scope", uid: testUID, id: testID},
		{name: "below a container", path: "/kubepods/pod" + testUID + "/" + testID + "/init.scope", uid: testUID, id: testID},
		{name: "pod cgroup", path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + testUID_ + ".slice"},
		{name: "cgroupfs pod cgroup", path: "/kubepods/burstable/pod" + testUID},
		{name: "qos cgroup", path: "/kubepods.slice/kubepods-burstable.slice"},
		{name: "kubepods", path: "/kubepods"},
		{name: "root", path: "/"},
		{name: "empty", path: ""},
		{name: "system service", path: "/system.slice/containerd.service"},
		{name: "crio conmon", path: "/kubepods.slice/kubepods-pod" + testUID_ + ".slice/crio-conmon-" + testID + ".scope"},
		{name: "cgroupfs crio conmon", path: "/kubepods/pod" + testUID + "/crio-conmon-" + testID},
		{name: "unknown scope prefix", path: "/kubepods.slice/kubepods-pod" + testUID_ + ".slice/rkt-" + testID + ".scope"},
		{name: "systemd leaf without scope", path: "/kubepods.slice/kubepods-pod" + testUID_ + ".slice/" + testID},
		{name: "cgroupfs leaf with scope", path: "/kubepods/pod" + testUID + "/cri-containerd-" + testID + ".scope"},
		{name: "pod dir outside kubepods", path: "/other/pod" + testUID + "/" + testID},
		{name: "pod slice outside kubepods", path: "/other.slice/other-pod" + testUID_ + ".slice/crio-" + testID + ".scope"},
		{name: "dashes in systemd uid", path: "/kubepods.slice/kubepods-pod" + testUID + ".slice/crio-" + testID + ".scope"},
		{name: "malformed uid", path: "/kubepods/podxyz/" + testID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, id, ok := ParseContainerPath(tt.path)
			if tt.uid == "" {
				assert.False(t, ok, "got %q %q", uid, id)
				assert.Empty(t, uid)
				assert.Empty(t, id)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tt.uid, uid)
			assert.Equal(t, tt.id, id)
		})
	}
}
