// The umbrella: `import slicesched.core;` gives every core interface.
export module slicesched.core;
export import slicesched.core.status;
export import slicesched.core.ids;
export import slicesched.core.shape;
export import slicesched.core.graph;
export import slicesched.core.accel;
export import slicesched.core.gmg;
export import slicesched.core.estimator;
export import slicesched.core.priors;
export import slicesched.core.sampling;
export import slicesched.core.backend;
