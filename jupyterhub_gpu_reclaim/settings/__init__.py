"""The service's options, each a trait declared in the body of the class that reads it:
`service.ServiceSettings` (the service's and jupyterhub-idle-culler 2.0's) and
`gpu_policy.GpuPolicyOptions` (the GPU policy's). `application.GpuReclaim` is both."""
