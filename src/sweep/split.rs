//! A plan's split targets (`instances = N`, run by `fleet::instances`): refused before anything
//! starts when their placements cannot hold them, and the client's driver made once per
//! instance.

use std::sync::Arc;

use super::plan::{ClientPlan, Plan, Series};
use crate::fleet::driver::Driver;
use crate::fleet::instances::DriverFactory;
use crate::placement::PlacementSource;

/// Refuses, before anything starts, a split target its placements cannot hold: more
/// instances than server CPUs, or fewer connections than instances.
/// A split target whose instances do not fit the plan's steps.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// A step opens fewer connections than the target has instances.
    #[error("target {target:?} has instances = {instances} but the step with {clients} clients opens only {connections} connections: each instance needs at least one (raise clients or connections_per_client, or lower instances)")]
    Connections {
        /// The target's name.
        target: String,
        /// Its instance count.
        instances: usize,
        /// The step's clients.
        clients: usize,
        /// The connections they open.
        connections: usize,
    },
    /// A placement gives the server fewer CPUs than the target has instances.
    #[error("target {target:?} has instances = {instances} but placement {placement:?}{} gives the server {} CPU(s) ({}): each instance needs a CPU of its own; lower instances or use a placement with at least {instances} server CPUs", .clients.map_or(String::new(), |c| format!(" at {c} clients")), .server_cpus.len(), crate::cpuset::format(.server_cpus))]
    Cpus {
        /// The target's name.
        target: String,
        /// Its instance count.
        instances: usize,
        /// The placement.
        placement: String,
        /// The client count, when the cpusets follow it.
        clients: Option<usize>,
        /// The server's CPUs under it.
        server_cpus: Vec<usize>,
    },
}

/// Checks that every split target's instances get a connection and a CPU each.
pub fn check_fit(plan: &Plan, placements: &dyn PlacementSource) -> Result<(), FitError> {
    for target in plan.targets.iter().filter(|t| t.instances > 1) {
        let n = target.instances;
        let counts = match &plan.series {
            Series::Clients(c) => c.clone(),
            Series::Rates { clients, .. } | Series::Find { clients, .. } => vec![*clients],
        };
        if let Some(&c) = counts
            .iter()
            .find(|&&c| c * plan.connections_per_client < n)
        {
            return Err(FitError::Connections {
                target: target.name.clone(),
                instances: n,
                clients: c,
                connections: c * plan.connections_per_client,
            });
        }
        for placement in &plan.placements {
            for &c in &counts {
                let follow = plan.cpus_follow_clients.then_some(c);
                // A placement that cannot give cpusets skips its steps anyway.
                let Ok(cpus) = placements.cpus(placement, follow) else {
                    continue;
                };
                if cpus.server.len() < n {
                    return Err(FitError::Cpus {
                        target: target.name.clone(),
                        instances: n,
                        placement: placement.clone(),
                        clients: follow,
                        server_cpus: cpus.server.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The factory of a plan's client.
pub fn driver_factory(client: &ClientPlan) -> DriverFactory {
    match client {
        ClientPlan::Engine {
            proto,
            arrivals,
            connect,
        } => {
            let (proto, arrivals, connect) = (proto.clone(), *arrivals, connect.clone());
            Arc::new(move || {
                Ok(Box::new(crate::fleet::driver::EngineDriver {
                    proto: proto.clone(),
                    arrivals,
                    connect: connect.clone(),
                }) as Box<dyn Driver>)
            })
        }
        ClientPlan::Command {
            template,
            parser,
            options,
        } => {
            let (template, parser, options) = (template.clone(), parser.clone(), options.clone());
            Arc::new(move || {
                Ok(Box::new(crate::fleet::driver::CommandDriver {
                    template: template.clone(),
                    parser: crate::load::external::by_name(&parser, &options)?,
                }) as Box<dyn Driver>)
            })
        }
    }
}
