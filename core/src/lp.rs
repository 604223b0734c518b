//! A thin layer over `good_lp` shared by the policies and the bounds: which
//! pure-Rust solver to use, and errors mapped to [`Error::Solver`].

use good_lp::{ProblemVariables, Solution, SolverModel, Variable};

use crate::error::{Error, Result};

pub use good_lp::{constraint, variable, Expression};

/// Which LP solver to use (both are pure Rust).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LpSolver {
    /// `microlp`: a dual simplex; exact vertex solutions, best for the small
    /// problems of one scheduling decision.
    #[default]
    Simplex,
    /// `clarabel`: an interior-point method; scales better to the large
    /// bound problems (thousands of jobs).
    InteriorPoint,
}

/// An LP under construction: variables, then constraints, then an objective.
#[derive(Default)]
pub struct Lp {
    vars: ProblemVariables,
    constraints: Vec<good_lp::Constraint>,
}

impl std::fmt::Debug for Lp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lp")
            .field("variables", &self.vars.len())
            .field("constraints", &self.constraints.len())
            .finish()
    }
}

impl Lp {
    /// An empty problem.
    pub fn new() -> Self {
        Self::default()
    }

    /// A variable in `[min, max]`.
    pub fn var(&mut self, min: f64, max: f64) -> Variable {
        self.vars.add(variable().min(min).max(max))
    }

    /// A variable `>= 0`.
    pub fn nonneg(&mut self) -> Variable {
        self.vars.add(variable().min(0.0))
    }

    /// Adds `lhs <= rhs` (constant).
    pub fn le(&mut self, lhs: Expression, rhs: f64) {
        self.constraints.push(lhs.leq(rhs));
    }

    /// Adds `lhs >= rhs` (constant).
    pub fn ge(&mut self, lhs: Expression, rhs: f64) {
        self.constraints.push(lhs.geq(rhs));
    }

    /// Solves, maximizing (`maximize = true`) or minimizing `objective`.
    /// `what` names the problem in errors.
    pub fn solve(
        self,
        objective: Expression,
        maximize: bool,
        solver: LpSolver,
        what: &str,
    ) -> Result<LpSolution> {
        let problem = if maximize {
            self.vars.maximise(objective)
        } else {
            self.vars.minimise(objective)
        };
        let err = |e: good_lp::ResolutionError| Error::Solver {
            what: what.to_string(),
            message: e.to_string(),
        };
        let values = match solver {
            LpSolver::Simplex => {
                let mut model = problem.using(good_lp::solvers::microlp::microlp);
                for c in self.constraints {
                    model.add_constraint(c);
                }
                let s = model.solve().map_err(err)?;
                LpSolution::Microlp(s)
            }
            LpSolver::InteriorPoint => {
                let mut model = problem.using(good_lp::solvers::clarabel::clarabel);
                // ECOS-like accuracy (Gavel's solver uses 1e-8); the
                // defaults' extra digits cost iterations and change nothing here.
                model
                    .settings()
                    .tol_feas(1e-8)
                    .tol_gap_abs(1e-8)
                    .tol_gap_rel(1e-8)
                    .iterative_refinement_enable(false);
                for c in self.constraints {
                    model.add_constraint(c);
                }
                let s = model.solve().map_err(err)?;
                LpSolution::Clarabel(s)
            }
        };
        Ok(values)
    }
}

/// A solved LP.
pub enum LpSolution {
    /// From microlp.
    Microlp(good_lp::solvers::microlp::MicroLpSolution),
    /// From clarabel.
    Clarabel(good_lp::solvers::clarabel::ClarabelSolution),
}

impl std::fmt::Debug for LpSolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LpSolution")
    }
}

impl LpSolution {
    /// The value of a variable.
    pub fn value(&self, v: Variable) -> f64 {
        match self {
            Self::Microlp(s) => s.value(v),
            Self::Clarabel(s) => s.value(v),
        }
    }
}
