//! The kinds holding a pod template (Pod, Deployment, ReplicaSet, StatefulSet,
//! DaemonSet, Job, CronJob), which `kubectl create deployment|job|cronjob` and
//! client-go programs send as protobuf.
//!
//! Every message is taken apart field by field (`let pb::X { .. } = x`), so a field
//! added to `k8s-pb` fails to compile here instead of being dropped. The rare fields
//! with no mapping below are refused with a 415 naming the field (send JSON), never
//! dropped. The Go types decide omitted-vs-empty: gogo-protobuf writes every
//! non-pointer field, so a non-pointer number, string or bool that is zero is left out
//! (as `omitempty` does in JSON), while pointers (`replicas`, `suspend`, ...) keep an
//! explicit zero, and non-pointer structs (`resources`, `strategy`) stay as `{}`.

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::apps::v1 as pb_apps;
use k8s_pb::api::batch::v1 as pb_batch;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::apimachinery::pkg::api::resource as pb_resource;
use k8s_pb::apimachinery::pkg::util::intstr as pb_intstr;
use serde_json::Value;

use super::{
    ProtobufError, int_or_string, label_selector, object_meta, opt_map, opt_nonzero, opt_str,
    opt_vec,
};

type Result<T, E = ProtobufError> = std::result::Result<T, E>;

/// A field this mapping does not carry: refused (415) rather than dropped.
fn reject(present: bool, field: &'static str) -> Result<()> {
    if present {
        Err(ProtobufError::UnsupportedField(field))
    } else {
        Ok(())
    }
}

/// `opt_vec` for conversions that can refuse a field.
fn try_vec<T, U>(v: Vec<T>, f: impl Fn(T) -> Result<U>) -> Result<Option<Vec<U>>> {
    if v.is_empty() {
        Ok(None)
    } else {
        v.into_iter().map(f).collect::<Result<Vec<_>>>().map(Some)
    }
}

/// A non-pointer Go bool: false is left out of JSON.
fn opt_true(b: Option<bool>) -> Option<bool> {
    b.filter(|b| *b)
}

fn quantity(q: pb_resource::Quantity) -> Quantity {
    Quantity(q.string.unwrap_or_default())
}

fn local_name(r: Option<pb_core::LocalObjectReference>) -> Option<String> {
    r.and_then(|r| opt_str(r.name))
}

/// Go decodes a template's metadata with a zero `creationTimestamp`, which it renders
/// as `null` (what kubectl's JSON for the same object holds too), so the stored
/// object is the same whichever encoding the client used.
pub(super) fn template_timestamps(mut obj: Value) -> Value {
    for ptr in [
        "/spec/template/metadata",
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ] {
        if let Some(Value::Object(m)) = obj.pointer_mut(ptr) {
            m.entry("creationTimestamp").or_insert(Value::Null);
        }
    }
    obj
}

// ---- kinds -------------------------------------------------------------------

pub(super) fn pod(p: pb_core::Pod) -> Result<core::Pod> {
    let pb_core::Pod {
        metadata,
        spec,
        status: _, // the server's to set
    } = p;
    Ok(core::Pod {
        metadata: object_meta(metadata),
        spec: spec.map(pod_spec).transpose()?,
        status: None,
    })
}

pub(super) fn deployment(d: pb_apps::Deployment) -> Result<apps::Deployment> {
    let pb_apps::Deployment {
        metadata,
        spec,
        status: _,
    } = d;
    let spec = spec
        .map(|s| -> Result<apps::DeploymentSpec> {
            let pb_apps::DeploymentSpec {
                replicas,
                selector,
                template,
                strategy,
                min_ready_seconds,
                revision_history_limit,
                paused,
                progress_deadline_seconds,
            } = s;
            Ok(apps::DeploymentSpec {
                replicas,
                selector: selector.map(label_selector).unwrap_or_default(),
                template: pod_template(template)?,
                strategy: strategy.map(|st| {
                    let pb_apps::DeploymentStrategy {
                        r#type,
                        rolling_update,
                    } = st;
                    apps::DeploymentStrategy {
                        type_: opt_str(r#type),
                        rolling_update: rolling_update.map(|r| {
                            let pb_apps::RollingUpdateDeployment {
                                max_unavailable,
                                max_surge,
                            } = r;
                            apps::RollingUpdateDeployment {
                                max_unavailable: max_unavailable.and_then(int_or_string),
                                max_surge: max_surge.and_then(int_or_string),
                            }
                        }),
                    }
                }),
                min_ready_seconds: opt_nonzero(min_ready_seconds),
                revision_history_limit,
                paused: opt_true(paused),
                progress_deadline_seconds,
            })
        })
        .transpose()?;
    Ok(apps::Deployment {
        metadata: object_meta(metadata),
        spec,
        status: None,
    })
}

pub(super) fn replica_set(r: pb_apps::ReplicaSet) -> Result<apps::ReplicaSet> {
    let pb_apps::ReplicaSet {
        metadata,
        spec,
        status: _,
    } = r;
    let spec = spec
        .map(|s| -> Result<apps::ReplicaSetSpec> {
            let pb_apps::ReplicaSetSpec {
                replicas,
                min_ready_seconds,
                selector,
                template,
            } = s;
            Ok(apps::ReplicaSetSpec {
                replicas,
                min_ready_seconds: opt_nonzero(min_ready_seconds),
                selector: selector.map(label_selector).unwrap_or_default(),
                template: template.map(pod_template_spec).transpose()?,
            })
        })
        .transpose()?;
    Ok(apps::ReplicaSet {
        metadata: object_meta(metadata),
        spec,
        status: None,
    })
}

pub(super) fn stateful_set(s: pb_apps::StatefulSet) -> Result<apps::StatefulSet> {
    let pb_apps::StatefulSet {
        metadata,
        spec,
        status: _,
    } = s;
    let spec = spec
        .map(|s| -> Result<apps::StatefulSetSpec> {
            let pb_apps::StatefulSetSpec {
                replicas,
                selector,
                template,
                volume_claim_templates,
                service_name,
                pod_management_policy,
                update_strategy,
                revision_history_limit,
                min_ready_seconds,
                persistent_volume_claim_retention_policy,
                ordinals,
            } = s;
            reject(
                !volume_claim_templates.is_empty(),
                "spec.volumeClaimTemplates",
            )?;
            reject(
                persistent_volume_claim_retention_policy.is_some(),
                "spec.persistentVolumeClaimRetentionPolicy",
            )?;
            Ok(apps::StatefulSetSpec {
                replicas,
                selector: selector.map(label_selector).unwrap_or_default(),
                template: pod_template(template)?,
                volume_claim_templates: None,
                service_name: opt_str(service_name),
                pod_management_policy: opt_str(pod_management_policy),
                update_strategy: update_strategy.map(|u| {
                    let pb_apps::StatefulSetUpdateStrategy {
                        r#type,
                        rolling_update,
                    } = u;
                    apps::StatefulSetUpdateStrategy {
                        type_: opt_str(r#type),
                        rolling_update: rolling_update.map(|r| {
                            let pb_apps::RollingUpdateStatefulSetStrategy {
                                partition,
                                max_unavailable,
                            } = r;
                            apps::RollingUpdateStatefulSetStrategy {
                                partition,
                                max_unavailable: max_unavailable.and_then(int_or_string),
                            }
                        }),
                    }
                }),
                revision_history_limit,
                min_ready_seconds: opt_nonzero(min_ready_seconds),
                persistent_volume_claim_retention_policy: None,
                ordinals: ordinals.map(|o| apps::StatefulSetOrdinals { start: o.start }),
            })
        })
        .transpose()?;
    Ok(apps::StatefulSet {
        metadata: object_meta(metadata),
        spec,
        status: None,
    })
}

pub(super) fn daemon_set(d: pb_apps::DaemonSet) -> Result<apps::DaemonSet> {
    let pb_apps::DaemonSet {
        metadata,
        spec,
        status: _,
    } = d;
    let spec = spec
        .map(|s| -> Result<apps::DaemonSetSpec> {
            let pb_apps::DaemonSetSpec {
                selector,
                template,
                update_strategy,
                min_ready_seconds,
                revision_history_limit,
            } = s;
            Ok(apps::DaemonSetSpec {
                selector: selector.map(label_selector).unwrap_or_default(),
                template: pod_template(template)?,
                update_strategy: update_strategy.map(|u| {
                    let pb_apps::DaemonSetUpdateStrategy {
                        r#type,
                        rolling_update,
                    } = u;
                    apps::DaemonSetUpdateStrategy {
                        type_: opt_str(r#type),
                        rolling_update: rolling_update.map(|r| {
                            let pb_apps::RollingUpdateDaemonSet {
                                max_unavailable,
                                max_surge,
                            } = r;
                            apps::RollingUpdateDaemonSet {
                                max_unavailable: max_unavailable.and_then(int_or_string),
                                max_surge: max_surge.and_then(int_or_string),
                            }
                        }),
                    }
                }),
                min_ready_seconds: opt_nonzero(min_ready_seconds),
                revision_history_limit,
            })
        })
        .transpose()?;
    Ok(apps::DaemonSet {
        metadata: object_meta(metadata),
        spec,
        status: None,
    })
}

pub(super) fn job(j: pb_batch::Job) -> Result<batch::Job> {
    let pb_batch::Job {
        metadata,
        spec,
        status: _,
    } = j;
    Ok(batch::Job {
        metadata: object_meta(metadata),
        spec: spec.map(job_spec).transpose()?,
        status: None,
    })
}

pub(super) fn cron_job(c: pb_batch::CronJob) -> Result<batch::CronJob> {
    let pb_batch::CronJob {
        metadata,
        spec,
        status: _,
    } = c;
    let spec = spec
        .map(|s| -> Result<batch::CronJobSpec> {
            let pb_batch::CronJobSpec {
                schedule,
                time_zone,
                starting_deadline_seconds,
                concurrency_policy,
                suspend,
                job_template,
                successful_jobs_history_limit,
                failed_jobs_history_limit,
            } = s;
            let job_template = job_template.unwrap_or_default();
            let pb_batch::JobTemplateSpec { metadata, spec } = job_template;
            Ok(batch::CronJobSpec {
                schedule: schedule.unwrap_or_default(),
                time_zone,
                starting_deadline_seconds,
                concurrency_policy: opt_str(concurrency_policy),
                suspend,
                job_template: batch::JobTemplateSpec {
                    metadata: metadata.map(|m| object_meta(Some(m))),
                    spec: spec.map(job_spec).transpose()?,
                },
                successful_jobs_history_limit,
                failed_jobs_history_limit,
            })
        })
        .transpose()?;
    Ok(batch::CronJob {
        metadata: object_meta(metadata),
        spec,
        status: None,
    })
}

fn job_spec(s: pb_batch::JobSpec) -> Result<batch::JobSpec> {
    let pb_batch::JobSpec {
        parallelism,
        completions,
        active_deadline_seconds,
        pod_failure_policy,
        success_policy,
        backoff_limit,
        backoff_limit_per_index,
        max_failed_indexes,
        selector,
        manual_selector,
        template,
        ttl_seconds_after_finished,
        completion_mode,
        suspend,
        pod_replacement_policy,
        managed_by,
    } = s;
    reject(pod_failure_policy.is_some(), "spec.podFailurePolicy")?;
    reject(success_policy.is_some(), "spec.successPolicy")?;
    Ok(batch::JobSpec {
        parallelism,
        completions,
        active_deadline_seconds,
        pod_failure_policy: None,
        success_policy: None,
        backoff_limit,
        backoff_limit_per_index,
        max_failed_indexes,
        selector: selector.map(label_selector),
        manual_selector,
        template: pod_template(template)?,
        ttl_seconds_after_finished,
        completion_mode,
        suspend,
        pod_replacement_policy,
        managed_by,
    })
}

// ---- pod template and spec ---------------------------------------------------

/// A non-pointer `template` (Deployment, Job, ...): always present.
fn pod_template(t: Option<pb_core::PodTemplateSpec>) -> Result<core::PodTemplateSpec> {
    pod_template_spec(t.unwrap_or_default())
}

fn pod_template_spec(t: pb_core::PodTemplateSpec) -> Result<core::PodTemplateSpec> {
    let pb_core::PodTemplateSpec { metadata, spec } = t;
    Ok(core::PodTemplateSpec {
        metadata: metadata.map(|m| object_meta(Some(m))),
        spec: spec.map(pod_spec).transpose()?,
    })
}

fn pod_spec(s: pb_core::PodSpec) -> Result<core::PodSpec> {
    let pb_core::PodSpec {
        volumes,
        init_containers,
        containers,
        ephemeral_containers,
        restart_policy,
        termination_grace_period_seconds,
        active_deadline_seconds,
        dns_policy,
        node_selector,
        service_account_name,
        service_account,
        automount_service_account_token,
        node_name,
        host_network,
        host_pid,
        host_ipc,
        share_process_namespace,
        security_context,
        image_pull_secrets,
        hostname,
        subdomain,
        affinity,
        scheduler_name,
        tolerations,
        host_aliases,
        priority_class_name,
        priority,
        dns_config,
        readiness_gates,
        runtime_class_name,
        enable_service_links,
        preemption_policy,
        overhead,
        topology_spread_constraints,
        set_hostname_as_fqdn,
        os,
        host_users,
        scheduling_gates,
        resource_claims,
        resources,
        hostname_override,
        workload_ref,
    } = s;
    reject(!ephemeral_containers.is_empty(), "spec.ephemeralContainers")?;
    reject(affinity.is_some(), "spec.affinity")?;
    reject(
        !topology_spread_constraints.is_empty(),
        "spec.topologySpreadConstraints",
    )?;
    reject(!resource_claims.is_empty(), "spec.resourceClaims")?;
    reject(workload_ref.is_some(), "spec.workloadRef")?;
    Ok(core::PodSpec {
        volumes: try_vec(volumes, volume)?,
        init_containers: try_vec(init_containers, container)?,
        containers: containers
            .into_iter()
            .map(container)
            .collect::<Result<Vec<_>>>()?,
        restart_policy: opt_str(restart_policy),
        termination_grace_period_seconds,
        active_deadline_seconds,
        dns_policy: opt_str(dns_policy),
        node_selector: opt_map(node_selector, |v| v),
        service_account_name: opt_str(service_account_name),
        service_account: opt_str(service_account),
        automount_service_account_token,
        node_name: opt_str(node_name),
        host_network: opt_true(host_network),
        host_pid: opt_true(host_pid),
        host_ipc: opt_true(host_ipc),
        share_process_namespace,
        security_context: security_context.map(pod_security_context).transpose()?,
        image_pull_secrets: opt_vec(image_pull_secrets, |r| core::LocalObjectReference {
            name: r.name.unwrap_or_default(),
        }),
        hostname: opt_str(hostname),
        subdomain: opt_str(subdomain),
        scheduler_name: opt_str(scheduler_name),
        tolerations: opt_vec(tolerations, |t| {
            let pb_core::Toleration {
                key,
                operator,
                value,
                effect,
                toleration_seconds,
            } = t;
            core::Toleration {
                key: opt_str(key),
                operator: opt_str(operator),
                value: opt_str(value),
                effect: opt_str(effect),
                toleration_seconds,
            }
        }),
        host_aliases: opt_vec(host_aliases, |h| core::HostAlias {
            ip: h.ip.unwrap_or_default(),
            hostnames: opt_vec(h.hostnames, |v| v),
        }),
        priority_class_name: opt_str(priority_class_name),
        priority,
        dns_config: dns_config.map(|d| core::PodDNSConfig {
            nameservers: opt_vec(d.nameservers, |v| v),
            searches: opt_vec(d.searches, |v| v),
            options: opt_vec(d.options, |o| core::PodDNSConfigOption {
                name: opt_str(o.name),
                value: o.value,
            }),
        }),
        readiness_gates: opt_vec(readiness_gates, |g| core::PodReadinessGate {
            condition_type: g.condition_type.unwrap_or_default(),
        }),
        runtime_class_name,
        enable_service_links,
        preemption_policy,
        overhead: opt_map(overhead, quantity),
        set_hostname_as_fqdn,
        os: os.map(|o| core::PodOS {
            name: o.name.unwrap_or_default(),
        }),
        host_users,
        scheduling_gates: opt_vec(scheduling_gates, |g| core::PodSchedulingGate {
            name: g.name.unwrap_or_default(),
        }),
        resources: resources.map(resource_requirements),
        hostname_override,
        ephemeral_containers: None,
        affinity: None,
        topology_spread_constraints: None,
        resource_claims: None,
    })
}

fn pod_security_context(c: pb_core::PodSecurityContext) -> Result<core::PodSecurityContext> {
    let pb_core::PodSecurityContext {
        se_linux_options,
        windows_options,
        run_as_user,
        run_as_group,
        run_as_non_root,
        supplemental_groups,
        supplemental_groups_policy,
        fs_group,
        sysctls,
        fs_group_change_policy,
        seccomp_profile,
        app_armor_profile,
        se_linux_change_policy,
    } = c;
    reject(
        windows_options.is_some(),
        "spec.securityContext.windowsOptions",
    )?;
    Ok(core::PodSecurityContext {
        se_linux_options: se_linux_options.map(se_linux),
        windows_options: None,
        run_as_user,
        run_as_group,
        run_as_non_root,
        supplemental_groups: opt_vec(supplemental_groups, |g| g),
        supplemental_groups_policy,
        fs_group,
        sysctls: opt_vec(sysctls, |s| core::Sysctl {
            name: s.name.unwrap_or_default(),
            value: s.value.unwrap_or_default(),
        }),
        fs_group_change_policy,
        seccomp_profile: seccomp_profile.map(seccomp),
        app_armor_profile: app_armor_profile.map(app_armor),
        se_linux_change_policy,
    })
}

fn se_linux(o: pb_core::SeLinuxOptions) -> core::SELinuxOptions {
    core::SELinuxOptions {
        user: opt_str(o.user),
        role: opt_str(o.role),
        type_: opt_str(o.r#type),
        level: opt_str(o.level),
    }
}

fn seccomp(p: pb_core::SeccompProfile) -> core::SeccompProfile {
    core::SeccompProfile {
        type_: p.r#type.unwrap_or_default(),
        localhost_profile: p.localhost_profile,
    }
}

fn app_armor(p: pb_core::AppArmorProfile) -> core::AppArmorProfile {
    core::AppArmorProfile {
        type_: p.r#type.unwrap_or_default(),
        localhost_profile: p.localhost_profile,
    }
}

fn resource_requirements(r: pb_core::ResourceRequirements) -> core::ResourceRequirements {
    let pb_core::ResourceRequirements {
        limits,
        requests,
        claims,
    } = r;
    core::ResourceRequirements {
        limits: opt_map(limits, quantity),
        requests: opt_map(requests, quantity),
        claims: opt_vec(claims, |c| core::ResourceClaim {
            name: c.name.unwrap_or_default(),
            request: opt_str(c.request),
        }),
    }
}

fn container(c: pb_core::Container) -> Result<core::Container> {
    let pb_core::Container {
        name,
        image,
        command,
        args,
        working_dir,
        ports,
        env_from,
        env,
        resources,
        resize_policy,
        restart_policy,
        restart_policy_rules,
        volume_mounts,
        volume_devices,
        liveness_probe,
        readiness_probe,
        startup_probe,
        lifecycle,
        termination_message_path,
        termination_message_policy,
        image_pull_policy,
        security_context,
        stdin,
        stdin_once,
        tty,
    } = c;
    reject(
        !restart_policy_rules.is_empty(),
        "spec.containers[].restartPolicyRules",
    )?;
    reject(
        !volume_devices.is_empty(),
        "spec.containers[].volumeDevices",
    )?;
    Ok(core::Container {
        name: name.unwrap_or_default(),
        image: opt_str(image),
        command: opt_vec(command, |v| v),
        args: opt_vec(args, |v| v),
        working_dir: opt_str(working_dir),
        ports: opt_vec(ports, |p| {
            let pb_core::ContainerPort {
                name,
                host_port,
                container_port,
                protocol,
                host_ip,
            } = p;
            core::ContainerPort {
                name: opt_str(name),
                host_port: opt_nonzero(host_port),
                container_port: container_port.unwrap_or_default(),
                protocol: opt_str(protocol),
                host_ip: opt_str(host_ip),
            }
        }),
        env_from: opt_vec(env_from, env_from_source),
        env: opt_vec(env, env_var),
        resources: resources.map(resource_requirements),
        resize_policy: opt_vec(resize_policy, |p| core::ContainerResizePolicy {
            resource_name: p.resource_name.unwrap_or_default(),
            restart_policy: p.restart_policy.unwrap_or_default(),
        }),
        restart_policy,
        restart_policy_rules: None,
        volume_mounts: opt_vec(volume_mounts, |m| {
            let pb_core::VolumeMount {
                name,
                read_only,
                recursive_read_only,
                mount_path,
                sub_path,
                mount_propagation,
                sub_path_expr,
            } = m;
            core::VolumeMount {
                name: name.unwrap_or_default(),
                read_only: opt_true(read_only),
                recursive_read_only,
                mount_path: mount_path.unwrap_or_default(),
                sub_path: opt_str(sub_path),
                mount_propagation,
                sub_path_expr: opt_str(sub_path_expr),
            }
        }),
        volume_devices: None,
        liveness_probe: liveness_probe.map(probe),
        readiness_probe: readiness_probe.map(probe),
        startup_probe: startup_probe.map(probe),
        lifecycle: lifecycle.map(|l| {
            let pb_core::Lifecycle {
                post_start,
                pre_stop,
                stop_signal,
            } = l;
            core::Lifecycle {
                post_start: post_start.map(lifecycle_handler),
                pre_stop: pre_stop.map(lifecycle_handler),
                stop_signal,
            }
        }),
        termination_message_path: opt_str(termination_message_path),
        termination_message_policy: opt_str(termination_message_policy),
        image_pull_policy: opt_str(image_pull_policy),
        security_context: security_context
            .map(container_security_context)
            .transpose()?,
        stdin: opt_true(stdin),
        stdin_once: opt_true(stdin_once),
        tty: opt_true(tty),
    })
}

fn container_security_context(c: pb_core::SecurityContext) -> Result<core::SecurityContext> {
    let pb_core::SecurityContext {
        capabilities,
        privileged,
        se_linux_options,
        windows_options,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile,
        app_armor_profile,
    } = c;
    reject(
        windows_options.is_some(),
        "spec.containers[].securityContext.windowsOptions",
    )?;
    Ok(core::SecurityContext {
        capabilities: capabilities.map(|c| core::Capabilities {
            add: opt_vec(c.add, |v| v),
            drop: opt_vec(c.drop, |v| v),
        }),
        privileged,
        se_linux_options: se_linux_options.map(se_linux),
        windows_options: None,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile: seccomp_profile.map(seccomp),
        app_armor_profile: app_armor_profile.map(app_armor),
    })
}

fn env_from_source(e: pb_core::EnvFromSource) -> core::EnvFromSource {
    let pb_core::EnvFromSource {
        prefix,
        config_map_ref,
        secret_ref,
    } = e;
    core::EnvFromSource {
        prefix: opt_str(prefix),
        config_map_ref: config_map_ref.map(|r| core::ConfigMapEnvSource {
            name: local_name(r.local_object_reference).unwrap_or_default(),
            optional: r.optional,
        }),
        secret_ref: secret_ref.map(|r| core::SecretEnvSource {
            name: local_name(r.local_object_reference).unwrap_or_default(),
            optional: r.optional,
        }),
    }
}

fn env_var(e: pb_core::EnvVar) -> core::EnvVar {
    let pb_core::EnvVar {
        name,
        value,
        value_from,
    } = e;
    let value_from = value_from.map(|v| {
        let pb_core::EnvVarSource {
            field_ref,
            resource_field_ref,
            config_map_key_ref,
            secret_key_ref,
            file_key_ref,
        } = v;
        core::EnvVarSource {
            field_ref: field_ref.map(|f| core::ObjectFieldSelector {
                api_version: opt_str(f.api_version),
                field_path: f.field_path.unwrap_or_default(),
            }),
            resource_field_ref: resource_field_ref.map(|r| core::ResourceFieldSelector {
                container_name: opt_str(r.container_name),
                resource: r.resource.unwrap_or_default(),
                divisor: r.divisor.map(quantity),
            }),
            config_map_key_ref: config_map_key_ref.map(|r| core::ConfigMapKeySelector {
                name: local_name(r.local_object_reference).unwrap_or_default(),
                key: r.key.unwrap_or_default(),
                optional: r.optional,
            }),
            secret_key_ref: secret_key_ref.map(|r| core::SecretKeySelector {
                name: local_name(r.local_object_reference).unwrap_or_default(),
                key: r.key.unwrap_or_default(),
                optional: r.optional,
            }),
            file_key_ref: file_key_ref.map(|f| core::FileKeySelector {
                volume_name: f.volume_name.unwrap_or_default(),
                path: f.path.unwrap_or_default(),
                key: f.key.unwrap_or_default(),
                optional: f.optional,
            }),
        }
    });
    core::EnvVar {
        name: name.unwrap_or_default(),
        value: opt_str(value),
        value_from,
    }
}

fn probe(p: pb_core::Probe) -> core::Probe {
    let pb_core::Probe {
        handler,
        initial_delay_seconds,
        timeout_seconds,
        period_seconds,
        success_threshold,
        failure_threshold,
        termination_grace_period_seconds,
    } = p;
    let pb_core::ProbeHandler {
        exec,
        http_get,
        tcp_socket,
        grpc,
    } = handler.unwrap_or_default();
    core::Probe {
        exec: exec.map(exec_action),
        http_get: http_get.map(http_get_action),
        tcp_socket: tcp_socket.map(tcp_socket_action),
        grpc: grpc.map(|g| core::GRPCAction {
            port: g.port.unwrap_or_default(),
            service: g.service,
        }),
        initial_delay_seconds: opt_nonzero(initial_delay_seconds),
        timeout_seconds: opt_nonzero(timeout_seconds),
        period_seconds: opt_nonzero(period_seconds),
        success_threshold: opt_nonzero(success_threshold),
        failure_threshold: opt_nonzero(failure_threshold),
        termination_grace_period_seconds,
    }
}

fn lifecycle_handler(h: pb_core::LifecycleHandler) -> core::LifecycleHandler {
    let pb_core::LifecycleHandler {
        exec,
        http_get,
        tcp_socket,
        sleep,
    } = h;
    core::LifecycleHandler {
        exec: exec.map(exec_action),
        http_get: http_get.map(http_get_action),
        tcp_socket: tcp_socket.map(tcp_socket_action),
        sleep: sleep.map(|s| core::SleepAction {
            seconds: s.seconds.unwrap_or_default(),
        }),
    }
}

fn exec_action(e: pb_core::ExecAction) -> core::ExecAction {
    core::ExecAction {
        command: opt_vec(e.command, |v| v),
    }
}

/// A probe's port: required, so an unset one is 0 for validation to refuse.
fn port(p: Option<pb_intstr::IntOrString>) -> IntOrString {
    p.and_then(int_or_string).unwrap_or(IntOrString::Int(0))
}

fn http_get_action(h: pb_core::HttpGetAction) -> core::HTTPGetAction {
    let pb_core::HttpGetAction {
        path,
        port: p,
        host,
        scheme,
        http_headers,
    } = h;
    core::HTTPGetAction {
        path: opt_str(path),
        port: port(p),
        host: opt_str(host),
        scheme: opt_str(scheme),
        http_headers: opt_vec(http_headers, |h| core::HTTPHeader {
            name: h.name.unwrap_or_default(),
            value: h.value.unwrap_or_default(),
        }),
    }
}

fn tcp_socket_action(t: pb_core::TcpSocketAction) -> core::TCPSocketAction {
    core::TCPSocketAction {
        port: port(t.port),
        host: opt_str(t.host),
    }
}

// ---- volumes -----------------------------------------------------------------

fn volume(v: pb_core::Volume) -> Result<core::Volume> {
    let pb_core::Volume {
        name,
        volume_source,
    } = v;
    let pb_core::VolumeSource {
        host_path,
        empty_dir,
        gce_persistent_disk,
        aws_elastic_block_store,
        git_repo,
        secret,
        nfs,
        iscsi,
        glusterfs,
        persistent_volume_claim,
        rbd,
        flex_volume,
        cinder,
        cephfs,
        flocker,
        downward_api,
        fc,
        azure_file,
        config_map,
        vsphere_volume,
        quobyte,
        azure_disk,
        photon_persistent_disk,
        projected,
        portworx_volume,
        scale_io,
        storageos,
        csi,
        ephemeral,
        image,
    } = volume_source.unwrap_or_default();
    // Volume sources devcluster cannot provide anyway (cloud disks, network
    // filesystems) and the rarer in-tree ones are refused, not dropped.
    for (present, field) in [
        (gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
        (git_repo.is_some(), "gitRepo"),
        (nfs.is_some(), "nfs"),
        (iscsi.is_some(), "iscsi"),
        (glusterfs.is_some(), "glusterfs"),
        (rbd.is_some(), "rbd"),
        (flex_volume.is_some(), "flexVolume"),
        (cinder.is_some(), "cinder"),
        (cephfs.is_some(), "cephfs"),
        (flocker.is_some(), "flocker"),
        (fc.is_some(), "fc"),
        (azure_file.is_some(), "azureFile"),
        (vsphere_volume.is_some(), "vsphereVolume"),
        (quobyte.is_some(), "quobyte"),
        (azure_disk.is_some(), "azureDisk"),
        (photon_persistent_disk.is_some(), "photonPersistentDisk"),
        (projected.is_some(), "projected"),
        (portworx_volume.is_some(), "portworxVolume"),
        (scale_io.is_some(), "scaleIO"),
        (storageos.is_some(), "storageos"),
        (csi.is_some(), "csi"),
        (ephemeral.is_some(), "ephemeral"),
        (image.is_some(), "image"),
    ] {
        if present {
            return Err(ProtobufError::UnsupportedVolume(field));
        }
    }
    let items = |items: Vec<pb_core::KeyToPath>| {
        opt_vec(items, |k| core::KeyToPath {
            key: k.key.unwrap_or_default(),
            path: k.path.unwrap_or_default(),
            mode: k.mode,
        })
    };
    Ok(core::Volume {
        name: name.unwrap_or_default(),
        host_path: host_path.map(|h| core::HostPathVolumeSource {
            path: h.path.unwrap_or_default(),
            type_: h.r#type,
        }),
        empty_dir: empty_dir.map(|e| core::EmptyDirVolumeSource {
            medium: opt_str(e.medium),
            size_limit: e.size_limit.map(quantity),
        }),
        secret: secret.map(|s| core::SecretVolumeSource {
            secret_name: opt_str(s.secret_name),
            items: items(s.items),
            default_mode: s.default_mode,
            optional: s.optional,
        }),
        persistent_volume_claim: persistent_volume_claim.map(|p| {
            core::PersistentVolumeClaimVolumeSource {
                claim_name: p.claim_name.unwrap_or_default(),
                read_only: opt_true(p.read_only),
            }
        }),
        downward_api: downward_api.map(|d| core::DownwardAPIVolumeSource {
            items: opt_vec(d.items, |f| core::DownwardAPIVolumeFile {
                path: f.path.unwrap_or_default(),
                field_ref: f.field_ref.map(|f| core::ObjectFieldSelector {
                    api_version: opt_str(f.api_version),
                    field_path: f.field_path.unwrap_or_default(),
                }),
                resource_field_ref: f.resource_field_ref.map(|r| core::ResourceFieldSelector {
                    container_name: opt_str(r.container_name),
                    resource: r.resource.unwrap_or_default(),
                    divisor: r.divisor.map(quantity),
                }),
                mode: f.mode,
            }),
            default_mode: d.default_mode,
        }),
        config_map: config_map.map(|c| core::ConfigMapVolumeSource {
            name: local_name(c.local_object_reference).unwrap_or_default(),
            items: items(c.items),
            default_mode: c.default_mode,
            optional: c.optional,
        }),
        ..Default::default()
    })
}
